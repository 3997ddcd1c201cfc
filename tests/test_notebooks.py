"""The notebooks as files: ordered names, a clean top-to-bottom run stored,
nothing of the author's machine inside.  (Their outputs are checked by nbval,
which runs every notebook as a test.)"""

import json
import re
from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
PATHS = sorted(NOTEBOOKS.glob("*.ipynb"))
# absolute paths of the kinds a run leaves behind on Linux and macOS, and the
# path of this checkout, wherever it is
CHECKOUT = str(NOTEBOOKS.parent)
ABSOLUTE = re.compile(r"(/home/|/root/|/Users/|/tmp/|/private/var/|site-packages/|"
                      + re.escape(CHECKOUT) + ")")


def test_names_are_two_digit_contiguous_and_unique():
    names = [p.name for p in PATHS]
    assert names, "no notebooks found"
    assert all(re.fullmatch(r"\d\d_[a-z0-9_]+\.ipynb", n) for n in names), names
    numbers = [int(n[:2]) for n in names]
    assert numbers == list(range(len(names))), names


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_cells_were_run_once_in_order(path):
    cells = [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
    counts = [c["execution_count"] for c in cells]
    assert counts == list(range(1, len(cells) + 1)), f"{path.name}: execution counts {counts}"


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_no_absolute_paths_or_run_timestamps(path):
    text = path.read_text()
    found = sorted(set(ABSOLUTE.findall(text)))
    assert not found, f"{path.name} contains {found}"
    assert '"iopub.execute_input"' not in text, f"{path.name} stores cell timings"


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_opens_with_title_and_neighbour_links(path):
    first = json.loads(path.read_text())["cells"][0]
    source = "".join(first["source"])
    assert first["cell_type"] == "markdown" and source.startswith("# "), path.name
    index = PATHS.index(path)
    for neighbour in (PATHS[index - 1] if index else None,
                      PATHS[index + 1] if index + 1 < len(PATHS) else None):
        if neighbour is not None:
            assert f"({neighbour.name})" in source, f"{path.name} does not link {neighbour.name}"
