"""The notebooks as files: the course order, a clean top-to-bottom run stored,
nothing of the author's machine inside, the length budget, a static picture
beside every live Netron view, the torch 2.x route first.  (Their outputs are
checked by nbval, which runs every notebook as a test.)"""

import ast
import json
import re
from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
PATHS = sorted(NOTEBOOKS.glob("*.ipynb"))
# The course, in order (README and 00_overview show the same map).
COURSE = ["00_overview", "01_asinh", "02_deform_conv2d", "03_my_add", "04_torch_library",
          "05_knn_query", "06_selu", "07_ort_op_from_scratch", "08_end_to_end", "09_sharp_edges",
          "10_your_own_op", "11_cpp_host", "12_common_errors", "13_op_patterns",
          "14_ort_library_pitfalls", "15_export_pitfalls", "16_dtypes_lists_dynamic_sizes",
          "17_export_problems",
          "18_ort_problems",
          "19_ship_your_op",
          "20_ms_deform_attn",
          "21_build_and_load_problems",
          "22_packaging_problems",
          "23_graph_and_kernel_problems"]
# Notebooks built around one operator: their first export takes the torch 2.x route.
CASES = ["01_asinh", "02_deform_conv2d", "03_my_add", "04_torch_library", "05_knn_query",
         "06_selu", "08_end_to_end", "20_ms_deform_attn"]
MAX_CELLS = 45
MAX_MARKDOWN_WORDS = 2000
# absolute paths of the kinds a run leaves behind on Linux and macOS, and the
# path of this checkout, wherever it is
CHECKOUT = str(NOTEBOOKS.parent)
ABSOLUTE = re.compile(r"(/home/|/root/|/Users/|/tmp/|/private/var/|site-packages/|"
                      + re.escape(CHECKOUT) + ")")


def cells(path):
    return json.loads(path.read_text())["cells"]


def test_notebooks_are_the_course_in_order():
    assert [p.stem for p in PATHS] == COURSE


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_cells_were_run_once_in_order(path):
    code = [c for c in cells(path) if c["cell_type"] == "code"]
    counts = [c["execution_count"] for c in code]
    assert counts == list(range(1, len(code) + 1)), f"{path.name}: execution counts {counts}"


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_no_absolute_paths_or_run_timestamps(path):
    text = path.read_text()
    found = sorted(set(ABSOLUTE.findall(text)))
    assert not found, f"{path.name} contains {found}"
    assert '"iopub.execute_input"' not in text, f"{path.name} stores cell timings"


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_opens_with_title_and_neighbour_links(path):
    first = cells(path)[0]
    source = "".join(first["source"])
    assert first["cell_type"] == "markdown" and source.startswith("# "), path.name
    index = COURSE.index(path.stem)
    for neighbour in COURSE[max(index - 1, 0):index] + COURSE[index + 1:index + 2]:
        assert f"({neighbour}.ipynb)" in source, f"{path.name} does not link {neighbour}.ipynb"


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_length_budget(path):
    markdown = [c for c in cells(path) if c["cell_type"] == "markdown"]
    words = sum(len("".join(c["source"]).split()) for c in markdown)
    assert len(cells(path)) <= MAX_CELLS, f"{path.name}: {len(cells(path))} cells > {MAX_CELLS}"
    assert words <= MAX_MARKDOWN_WORDS, f"{path.name}: {words} words of markdown > {MAX_MARKDOWN_WORDS}"


def calls(source, name):
    """The calls in a cell to ``name`` or to ``anything.name``, in order."""
    if source.startswith("%%"):  # a cell magic: its body is not Python (a C++ file, ...)
        return []
    try:
        tree = ast.parse(source)
    except SyntaxError:  # IPython magics
        tree = ast.parse("\n".join(l for l in source.splitlines() if not l.lstrip().startswith(("%", "!"))))
    found = [n for n in ast.walk(tree) if isinstance(n, ast.Call)
             and (ast.unparse(n.func) == name or ast.unparse(n.func).endswith("." + name))]
    return sorted(found, key=lambda n: (n.lineno, n.col_offset))


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_every_netron_view_has_a_static_picture(path):
    for i, cell in enumerate(cells(path)):
        if cell["cell_type"] == "code" and calls("".join(cell["source"]), "netron_view"):
            kinds = [kind for output in cell["outputs"] for kind in output.get("data", {})]
            assert "image/png" in kinds, f"{path.name}, cell {i}: netron_view without a stored PNG"


@pytest.mark.parametrize("name", CASES)
def test_first_export_takes_the_torch_2_route(name):
    path = NOTEBOOKS / f"{name}.ipynb"
    exports = [call for cell in cells(path) if cell["cell_type"] == "code"
               for call in calls("".join(cell["source"]), "torch.onnx.export")]
    assert exports, f"{name} never calls torch.onnx.export"
    dynamo = [k.value for k in exports[0].keywords if k.arg == "dynamo"]
    assert not dynamo or ast.literal_eval(dynamo[0]) is True, (
        f"{name}: the first torch.onnx.export passes dynamo={ast.unparse(dynamo[0])}")


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_nbval_markers_are_ones_nbval_reads(path):
    # nbval acts on a comment only when it is exactly a marker: "# NBVAL_IGNORE_OUTPUT (why)"
    # is an ordinary comment, and the cell's output is then compared digit for digit.
    from nbval.plugin import comment_markers
    for cell in cells(path):
        for line in "".join(cell["source"]).splitlines():
            if line.strip().startswith("#") and "NBVAL" in line:
                assert line.strip().lstrip("#").strip() in comment_markers, \
                    f"{path.name}: {line.strip()!r} is not a marker nbval recognises"
