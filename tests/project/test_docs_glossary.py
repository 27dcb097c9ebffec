"""One glossary that every docs page links to, defining the shared terms once; every link
into it names a section that exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
GLOSSARY = DOCS / "glossary.md"
PAGES = [ROOT / "README.md", *sorted(p for p in DOCS.glob("*.md") if p != GLOSSARY)]
LINK = re.compile(r"\]\((?:docs/)?glossary\.md(?:#([\w-]+))?\)")


def _anchors(text: str) -> set[str]:
    """The ids of the page's headings, as MkDocs' toc extension writes them."""
    out = set()
    for title in re.findall(r"^#{1,6}\s+(.*?)\s*$", text, re.M):
        slug = re.sub(r"[^\w\s-]", "", title.replace("`", "")).strip().lower()
        out.add(re.sub(r"[\s-]+", "-", slug))
    return out


def test_every_page_links_to_the_glossary_and_its_anchors_exist():
    anchors = _anchors(GLOSSARY.read_text())
    for page in PAGES:
        targets = LINK.findall(page.read_text())
        assert targets, f"{page.name} never links to the glossary"
        missing = {t for t in targets if t and t not in anchors}
        assert not missing, f"{page.name} links to glossary sections that do not exist: {missing}"


def test_the_glossary_defines_the_shared_terms():
    text = GLOSSARY.read_text()
    for term in ("**Leak point 0", "**Leak point 1", "**Leak point 2", "**ASR**", "**tau**",
                 "**claimed**", "**sound**", "## Neighbouring relation", "## Sampling",
                 '"add-remove"', '"replace-one"', '"zero-out"', '"poisson"', '"fixed-size"',
                 '"random-allocation"', '"shuffle"', '"all"'):
        assert term in text, term
