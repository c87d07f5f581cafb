"""``python -m benchmarks [--quick] [--json] [--redis-url URL]``."""

import sys

from benchmarks.suite import main

sys.exit(main())
