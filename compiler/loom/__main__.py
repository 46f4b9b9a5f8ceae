import sys

from loom.tools.cli import main

sys.exit(main())
