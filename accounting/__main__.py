"""``python -m accounting`` runs the accountant CLI."""

import sys

from .cli import main

sys.exit(main())
