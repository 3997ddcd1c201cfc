"""python -m customops.check (see customops/check/__init__.py)."""

import sys

from .cli import main

sys.exit(main())
