"""Assemble docs/results.md from the benchmark outputs in one directory.

Each benchmark writes ``NAME.md`` (its printed Markdown, which starts with the date) and
``NAME.png`` into the directory; this page embeds them in a fixed order, with the command
that produced each. ``make results`` runs the four quick profiles and then this script.

Usage::

    python -m benchmarks.collect --dir docs/results --out docs/results.md
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path

#: (file stem, title if the output has none, command that produced it)
SECTIONS = (
    ("resilience", "Resilience of the defenses to gradient-leakage attacks",
     "python -m benchmarks.resilience --profile quick --out docs/results "
     "--results results/resilience.jsonl"),
    ("privacy", "Privacy: one setting, every accountant",
     "python -m benchmarks.privacy --profile quick --out docs/results"),
    ("accounting_speed", "Accounting speed and tightness: RDP and PLD against the peers",
     "python -m benchmarks.accounting_speed --profile quick --out docs/results"),
    ("utility", "Utility: accuracy, claimed and sound eps, accuracy at one budget",
     "python -m benchmarks.utility --profile quick --jobs 2 --out docs/results"),
    ("speed", "Speed against the peers, measured in the same run",
     "python -m benchmarks.speed --profile quick --out docs/results"),
    ("empirical_privacy", "Measured privacy: claimed vs sound vs measured eps",
     "python -m benchmarks.empirical_privacy --profile quick --out docs/results "
     "--results results/empirical_privacy.jsonl"),
    ("leakage_curves", "Leakage at batch sizes, local steps and noise levels",
     "python -m benchmarks.leakage_curves --profile quick --workers 2 --out docs/results"),
)


def page(directory: Path, out: Path) -> str:
    """The results page: every section found in ``directory`` (missing ones are named)."""
    rel = Path(os.path.relpath(directory, out.parent))
    lines = ["# Results", "",
             "Tables and figures as measured on this project's development machine (2 CPU "
             "cores, no GPU), each with the command that produced it; the first line of "
             "each section gives the date. Regenerate all of them with `make results`. "
             "Terms (leak points, ASR, tau, claimed vs sound): [glossary](glossary.md).", ""]
    missing = []
    for stem, title, command in SECTIONS:
        md = directory / f"{stem}.md"
        if not md.exists():
            missing.append(stem)
            continue
        body = md.read_text().strip().splitlines()
        if body and body[0].startswith("# "):  # the benchmark's own title (with its date)
            heading, body = "#" + body[0], body[1:]
        else:
            heading = f"## {title}"
        while body and not body[0].strip():
            body = body[1:]
        lines += [heading, ""]
        if not any(line.startswith("Command:") for line in body):  # resilience says its own
            lines += [f"Command: `{command}`", ""]
        for line in body:  # demote the benchmark's own sub-headings under this section
            lines.append("#" + line if line.startswith("#") else line)
        if (directory / f"{stem}.png").exists():
            lines += ["", f"![{stem}]({(rel / f'{stem}.png').as_posix()})"]
        lines.append("")
    if missing:
        lines += ["## Not yet measured", "",
                  "No output yet for: " + ", ".join(missing) + ".", ""]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, default=Path("docs/results"))
    parser.add_argument("--out", type=Path, default=Path("docs/results.md"))
    args = parser.parse_args(argv)
    if not args.dir.is_dir():
        parser.error(f"--dir {args.dir} is not a directory (run the benchmarks first)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(page(args.dir, args.out))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
