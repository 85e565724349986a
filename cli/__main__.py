"""``python -m schedlab.cli``: the ``schedlab`` command."""

import sys

from schedlab.cli import main

sys.exit(main())
