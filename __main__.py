"""``python -m parasol`` = the ``parasol`` command."""

import sys

from parasol.solver.cli import main

sys.exit(main())
