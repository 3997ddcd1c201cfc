"""Links and cross-references resolve, in the notebooks, notebooks/README.md, the
README and docs/*.md: a markdown link's file exists (a notebook must be one of
the course, COURSE), its `#anchor` is an `<a id="...">` of the target or, for
links between the notebooks, a heading of it, and a reference in words
("notebook 04, section 2", "section 3", "part 5", "[05](05_knn_query.ipynb),
section 3") names a notebook of the course and a numbered heading it has."""

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

from test_notebooks import COURSE, NOTEBOOKS, PATHS, cells

LINK = re.compile(r"\]\(([^)\s]+)\)")
# "notebook 04", "notebooks 03-05", "notebook 04's recipe"
NOTEBOOK_NUMBER = re.compile(r"\bnotebooks?\s+(\d\d)(?:\s*[-–]\s*(\d\d))?\b", re.IGNORECASE)
# "section 3", "part 5"; which notebook they are in is read from the words just before
SECTION = re.compile(r"\b(?:section|part)\s+(\d+)\b", re.IGNORECASE)
# "... notebook 04, " / "... (05_knn_query.ipynb), " / "... notebook 04's " right before "section 2"
OTHER_NOTEBOOK = re.compile(r"(?:notebook\s+(\d\d)|\((\d\d)_[a-z0-9_]+\.ipynb\))(?:,|'s)?\s*$", re.IGNORECASE)


def markdown(path):
    if path.suffix == ".md":
        return [(0, path.read_text())]
    return [(i, "".join(c["source"])) for i, c in enumerate(cells(path)) if c["cell_type"] == "markdown"]


def slug(heading):
    """The anchor GitHub and JupyterLab give a heading: lower case, punctuation dropped, spaces to dashes."""
    text = re.sub(r"[`*_]|<[^>]+>", "", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def ids(path):
    return {a for _, source in markdown(path) for a in re.findall(r'<a id="([^"]+)"', source)}


def anchors(path):
    return ids(path) | {slug(h) for _, source in markdown(path)
                        for h in re.findall(r"^#+\s+(.+)$", source, re.MULTILINE)}


def numbered_sections(path):
    """The numbers of the notebook's numbered headings: "## 3. Making it export" -> 3."""
    return {int(n) for _, source in markdown(path) for n in re.findall(r"^#{2,3}\s+(\d+)\.", source, re.MULTILINE)}


def course_notebook(number):
    stems = [stem for stem in COURSE if stem.startswith(number + "_")]
    return NOTEBOOKS / f"{stems[0]}.ipynb" if stems else None


# The pages outside notebooks/ link notebook cells by their <a id> alone: heading
# anchors differ between GitHub and JupyterLab.
PAGES = [NOTEBOOKS.parent / "README.md", *sorted((NOTEBOOKS.parent / "docs").glob("*.md"))]


@pytest.mark.parametrize("path", PATHS + [NOTEBOOKS / "README.md"] + PAGES, ids=lambda p: p.name)
def test_links_resolve(path):
    for i, source in markdown(path):
        for target in LINK.findall(source):
            if re.match(r"[a-z]+:", target):  # https:, mailto:
                continue
            file, _, anchor = unquote(target).partition("#")
            linked = (path.parent / file).resolve() if file else path
            assert linked.exists(), f"{path.name}, cell {i}: {target} does not exist"
            if linked.suffix == ".ipynb":
                assert linked.parent == NOTEBOOKS and linked.stem in COURSE, \
                    f"{path.name}, cell {i}: {target} is not a notebook of the course"
                if path in PAGES:
                    assert not anchor or anchor in ids(linked), f"{path.name} links {target}"
                    continue
            if anchor and linked.suffix in (".ipynb", ".md"):
                assert anchor in anchors(linked), f"{path.name}, cell {i}: {linked.name} has no anchor #{anchor}"


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_references_in_words_resolve(path):
    for i, source in markdown(path):
        for first, last in NOTEBOOK_NUMBER.findall(source):
            for number in range(int(first), int(last or first) + 1):
                assert course_notebook(f"{number:02d}"), f"{path.name}, cell {i}: no notebook {number:02d} in the course"
        for match in SECTION.finditer(source):
            before = OTHER_NOTEBOOK.search(source[max(match.start() - 80, 0):match.start()])
            target = course_notebook(before.group(1) or before.group(2)) if before else path
            assert target, f"{path.name}, cell {i}: {match.group(0)} of a notebook not in the course"
            assert int(match.group(1)) in numbered_sections(target), \
                f"{path.name}, cell {i}: '{match.group(0)}' but {target.name} has no heading numbered {match.group(1)}"


def test_the_checks_catch_broken_references(tmp_path):
    # the helpers above, on text with a known answer
    assert slug("## `min()` after unregistering a symbolic".lstrip("# ")) == "min-after-unregistering-a-symbolic"
    assert OTHER_NOTEBOOK.search("an onnxscript function (notebook 04, ").group(1) == "04"
    assert OTHER_NOTEBOOK.search("as [05](05_knn_query.ipynb), ").group(2) == "05"
    assert OTHER_NOTEBOOK.search("fails here: ") is None
    assert course_notebook("00") == NOTEBOOKS / "00_overview.ipynb" and course_notebook("99") is None
    assert 3 in numbered_sections(NOTEBOOKS / "03_my_add.ipynb") and 99 not in numbered_sections(NOTEBOOKS / "03_my_add.ipynb")
