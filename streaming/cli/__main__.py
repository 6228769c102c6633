"""``python -m streaming.cli``: the same as the ``segcoord`` script."""

import sys

from streaming.cli import main

sys.exit(main())
