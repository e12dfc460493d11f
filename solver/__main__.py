"""``python -m solver`` = the ``parasol`` command."""

import sys

from .cli import main

sys.exit(main())
