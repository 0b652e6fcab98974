import sys

from fraq.cli import main

sys.exit(main())
