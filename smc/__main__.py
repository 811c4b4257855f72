"""``python -m smc``: see smc.cli."""

import sys

from smc.cli import main

sys.exit(main())
