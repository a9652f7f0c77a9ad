import sys

from squall.cli.commands import main

sys.exit(main())
