#!/usr/bin/env bash
# Install Debian's Chromium (and its driver) for the real-browser test of the reconciliation view.
# Idempotent: does nothing when /usr/bin/chromium exists. The test drives it with Playwright for Python through
# executable_path=/usr/bin/chromium; `playwright install` (which downloads its own browser build) is never used.
set -euo pipefail

if [[ -x /usr/bin/chromium ]]; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "setup-browser: /usr/bin/chromium is missing and this is not a Debian-like system; install Chromium" >&2
  exit 2
fi
sudo=()
if [[ "$(id -u)" != 0 ]]; then
  sudo=(sudo)
fi
echo "setup-browser: installing Debian's chromium (a few minutes the first time) ..."
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null
echo "setup-browser: done ($(/usr/bin/chromium --version 2>/dev/null || echo 'chromium installed'))"
