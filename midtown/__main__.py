import sys

from midtown.cli import main

sys.exit(main())
