"""Every ```python block of the README and of docs/ runs, and the README stays short.

A block runs as a script would (``__name__ == "__main__"``, in a temporary directory, in a
fresh namespace). A block may be left out only with ``<!-- skip-test: reason -->`` on the line
just above it. Blocks slower than a few seconds are listed in ``SLOW`` and marked slow
(``make test`` runs them, ``make test-fast`` does not). While a block runs, the audit's local
process pool is replaced by this process (``ProcessEngine`` with one worker): the blocks show
the default engine, and the engines give the same table by design
(tests/leakaudit/auditing/test_engine.py).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.S | re.M)
SKIP = re.compile(r"<!--\s*skip-test:\s*(\S.*?)\s*-->")
#: blocks that take more than a few seconds on 2 cores: (page, index of its python block)
SLOW = {("README.md", 0), ("README.md", 2), ("attacks.md", 0), ("attacks.md", 1),
        ("measured-privacy.md", 0), ("measured-privacy.md", 1)}


def python_blocks(path: Path) -> list[tuple[int, str, str | None]]:
    """(index among the page's python blocks, code, skip reason or None) of ``path``."""
    text = path.read_text()
    out = []
    for m in FENCE.finditer(text):
        if m.group(1) != "python":
            continue
        before = text[:m.start()].rstrip().splitlines()
        skip = SKIP.fullmatch(before[-1].strip()) if before else None
        out.append((len(out), m.group(2), skip.group(1) if skip else None))
    return out


def _cases():
    for page in PAGES:
        for i, code, reason in python_blocks(page):
            marks = [pytest.mark.slow] if (page.name, i) in SLOW else []
            if reason:
                marks.append(pytest.mark.skip(reason=f"skip-test: {reason}"))
            yield pytest.param(page, code, marks=marks, id=f"{page.name}-{i}")


@pytest.mark.parametrize(("page", "code"), list(_cases()))
def test_code_block_runs(page, code, tmp_path, monkeypatch, one_torch_thread):
    from leakaudit import engines

    real = getattr(engines, "ProcessEngine", None)
    if real is not None:  # the same cells, run here: a pool start costs more than they do
        monkeypatch.setattr(engines, "ProcessEngine", lambda workers: real(1))
    monkeypatch.chdir(tmp_path)
    exec(compile(code, f"{page.name} (python block)", "exec"), {"__name__": "__main__"})


def test_pages_have_python_blocks_and_slow_list_is_current():
    """The extraction finds the blocks (a broken fence would silently test nothing), and every
    entry of SLOW names a block that exists."""
    found = {(p.name, i) for p in PAGES for i, _, _ in python_blocks(p)}
    assert ("README.md", 2) in found  # the README's three examples
    assert SLOW <= found


def test_readme_is_short_and_its_links_exist():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
        if "://" not in target:
            assert (ROOT / target).exists(), f"README links a missing file: {target}"


def test_skip_markers_are_rare():
    """Used sparingly: at most one skipped block per page."""
    for page in PAGES:
        assert sum(r is not None for _, _, r in python_blocks(page)) <= 1, page.name
