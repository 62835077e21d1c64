"""`python -m bench`: the benchmarks' program (`midtown-bench`)."""

import sys

from bench.main import main

sys.exit(main())
