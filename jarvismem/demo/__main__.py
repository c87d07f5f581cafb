"""``python -m jarvismem.demo child ...``: the demo's child process."""

import sys

from jarvismem.demo.child import main

if __name__ == "__main__":
    sys.exit(main())
