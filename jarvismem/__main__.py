"""``python -m jarvismem``: the same as the ``jarvismem`` command."""

import sys

from jarvismem.cli import main

if __name__ == "__main__":
    sys.exit(main())
