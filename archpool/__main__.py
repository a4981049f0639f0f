"""``python -m archpool``: the `archpool` command."""

import sys

from archpool.cli import main

sys.exit(main())
