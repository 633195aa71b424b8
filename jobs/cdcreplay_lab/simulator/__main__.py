import sys

from cdcreplay_lab.simulator.cli import main

sys.exit(main())
