"""``python -m parasol`` = the ``parasol`` command."""

import sys

try:
    from parasol.solver.cli import main
except KeyboardInterrupt:  # Ctrl-C while the command line is still being imported: one line, as main's
    print("parasol: interrupted", file=sys.stderr)
    sys.exit(130)

sys.exit(main())
