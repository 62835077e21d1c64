"""`python -m midtown.cli`: the `midtown` command."""

import sys

from midtown.cli.main import main

sys.exit(main())
