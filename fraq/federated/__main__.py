import sys

from fraq.federated.cli import main

sys.exit(main())
