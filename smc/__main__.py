"""``python -m smc``: see smc.api.cli."""

import sys

from smc.api.cli import main

sys.exit(main())
