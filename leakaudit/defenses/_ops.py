"""Old name of :mod:`leakaudit.defenses.ops` (the same module object, for old imports)."""

from __future__ import annotations

import sys

from . import ops

sys.modules[__name__] = ops
