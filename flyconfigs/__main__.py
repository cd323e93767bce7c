"""``python -m flyconfigs``: the command line."""

import sys

from flyconfigs.cli import main

sys.exit(main())
