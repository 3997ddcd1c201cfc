"""python -m customops.doctor (see customops/doctor/__init__.py)."""

import sys

from .cli import main

sys.exit(main())
