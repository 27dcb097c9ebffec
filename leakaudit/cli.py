"""``leakaudit`` command line. ``leakaudit epsilon ...`` forwards to the accountant CLI."""

from __future__ import annotations

import sys
from collections.abc import Sequence

USAGE = """usage: leakaudit <command> [options]

commands:
  epsilon    privacy of a (decaying) sampled Gaussian schedule under every accountant
  calibrate  smallest noise multiplier for a target eps
  max-steps  how many steps an eps budget allows
"""


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(USAGE)
        return 0
    if args[0] in ("epsilon", "calibrate", "max-steps"):
        from accounting.cli import main as accounting_main

        return accounting_main(args, prog="leakaudit")
    print(f"leakaudit: unknown command {args[0]!r}\n\n{USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
