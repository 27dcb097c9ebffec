"""``python -m leakaudit`` runs the leakaudit CLI."""

import sys

from .cli import main

sys.exit(main())
