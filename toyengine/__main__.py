"""``python -m toyengine``: the ``toyengine`` command line."""

import sys

from .cli import main

sys.exit(main())
