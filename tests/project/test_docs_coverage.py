"""The reference pages cover what the code has: every registered attack and every flag of
``leakaudit audit`` in docs/attacks.md, every bare-name parameter of PAPER_PARAMS and every
audit declaration of the Defense protocol in docs/defenses.md. A new attack, flag or
parameter without its line in the docs fails here."""

from __future__ import annotations

import argparse
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _audit_parser() -> argparse.ArgumentParser:
    from leakaudit.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices["audit"]


def test_attacks_page_covers_every_attack_and_every_audit_flag():
    from leakaudit import attacks

    text = (DOCS / "attacks.md").read_text()
    for name in attacks.available():
        assert f"| `{name}` |" in text, f"attack {name!r} has no row in docs/attacks.md"
    flags = [s for a in _audit_parser()._actions for s in a.option_strings
             if s.startswith("--") and s != "--help"]
    assert "--defense-param" in flags and "--empirical" in flags
    missing = [f for f in flags if f"`{f}" not in text]
    assert not missing, f"flags of `leakaudit audit` missing from docs/attacks.md: {missing}"


def test_defenses_page_covers_the_papers_parameters_and_the_audit_declarations():
    from leakaudit import defenses

    text = (DOCS / "defenses.md").read_text()
    for name, params in defenses.PAPER_PARAMS.items():
        assert f"`{name}`" in text, name
        for key, value in params.items():
            assert f"{key}={value}" in text, f"{name}: {key}={value}"
    for hook in ("audit_bound", "audit_batched", "audit_setup", "audit_side_ledgers"):
        assert hasattr(defenses.Defense, hook) and f"`{hook}(" in text, hook
