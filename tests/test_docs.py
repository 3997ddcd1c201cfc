"""The README is the first screen a newcomer reads: short, every notebook one
line, every reference page in docs/ linked from it (tests/test_notebook_links.py
follows the pages' own links)."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = sorted((ROOT / "docs").glob("*.md"))
LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)\s]*)?\)")


def links(page: Path) -> list[str]:
    return [t for t in LINK.findall(page.read_text()) if not t.startswith(("http:", "https:"))]


def test_readme_fits_on_about_a_page():
    assert len(README.read_text().splitlines()) <= 130


def test_readme_lists_every_notebook_once():
    text = README.read_text()
    for notebook in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        assert text.count(f"](notebooks/{notebook.name})") == 1, notebook.name


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_docs_page_is_linked_from_the_readme(page):
    assert f"docs/{page.name}" in links(README)
