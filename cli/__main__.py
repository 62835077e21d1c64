"""`python -m cli`: the `midtown` command."""

import sys

from cli.main import main

sys.exit(main())
