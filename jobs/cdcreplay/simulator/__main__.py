import sys

from cdcreplay.simulator.cli import main

sys.exit(main())
