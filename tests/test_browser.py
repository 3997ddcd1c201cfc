"""What our users see, in the browser they use (Debian's Chromium, headless).

- Netron: a model of each of the five cases, exported here, served by
  ``customops.notebook.graph.netron_view`` (what the notebooks call); the custom node
  must be drawn with its op type, its node name, its outputs, and its domain
  (Netron's "module" row in the node's properties).
- JupyterLab: ``jupyter lab`` on the notebooks folder as ``make lab`` starts
  it; the file browser lists the course in order, 00 opens with its title,
  and a course notebook runs cleanly in a kernel of that server.

What Netron 9.3.3 puts in the DOM (read from the rendered page):
  - graph node:  svg#canvas g#nodes > g.node.graph-node#"node-name-<node name>",
                 whose first g.node-item-type has <text>op_type</text> and
                 <title>node name</title>; a node calling an ONNX function
                 has a second item <text>ƒ</text> titled "Show Function
                 Definition".
  - graph inputs/outputs: g.graph-item-input / g.graph-item-output with
                 <text>name</text><title>float32[10,4]</title>.
  - edges:       path#"edge-<value name>"; text#"edge-label-edge-<value name>"
                 holds the shape, "10×4".
  - the domain is not drawn on the node: clicking it opens div#sidebar
                 ("Node Properties") with rows type / module / name, where
                 module is the domain ("custom", "custom-onnx-script"; for
                 standard ops "ai.onnx v<since version>"), then sections
                 Attributes, Inputs, Outputs ("name: <value name>").
  - functions:   select#toolbar-target-selector lists the graph and each
                 function of model.functions; selecting one draws its body.
Netron replaces window.eval, so Playwright calls that evaluate scripts in the
page (evaluate, all_inner_texts, wait_for_function) fail there: we read with
locators and parse inner_html.

Set CUSTOMOPS_DOCS_SCREENSHOTS=1 to also write docs/netron_knnquery.png.
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, TypeVar, Union
from urllib.parse import urlsplit

import onnx
import onnxscript
import pytest

import browser
from optable import DOMAIN, OPS

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
DOCS = ROOT / "docs"
TIMEOUT_MS = 30_000
# onnxscript resolves a function's annotations in the module's globals.
TFloat = TypeVar("TFloat", bound=Union[onnxscript.FLOAT16, onnxscript.FLOAT, onnxscript.DOUBLE])


# --- the browser ----------------------------------------------------------------


@pytest.fixture(scope="module")
def chromium(tmp_path_factory):
    """One headless Chromium (fresh profile) for the module; each test opens
    its own page.  Missing Chromium is a failure, not a skip: the project's
    set-up installs it."""
    problem = browser.missing_chromium_message()
    if problem:
        pytest.fail(problem, pytrace=False)
    from playwright.sync_api import sync_playwright

    playwright = sync_playwright().start()
    blocked: list[str] = []
    try:
        context = browser.launch_chromium(
            playwright, tmp_path_factory.mktemp("chromium-profile"), blocked)
    except BaseException:
        playwright.stop()
        raise
    context.set_default_timeout(TIMEOUT_MS)
    try:
        yield context
    finally:
        try:
            context.close()
        finally:
            playwright.stop()


def test_debian_chromium_is_installed():
    """A failure, not a skip, when the browser is missing (`make test` installs it)."""
    problem = browser.missing_chromium_message()
    assert problem is None, problem


@pytest.fixture
def page(chromium):
    page = chromium.new_page()
    yield page
    page.close()


# --- the five models --------------------------------------------------------------


def _asinh():
    import torch
    from exporting import export

    class AsinhModel(torch.nn.Module):
        def forward(self, x):
            return torch.asinh(x)

    # The new exporter maps aten::asinh to the standard Asinh natively
    # (the TorchScript one needs a symbolic: notebook 01).
    return export(AsinhModel(), (torch.zeros(2, 3),), dynamo=True,
                  input_names=["x"], output_names=["y"])


def _deform_conv2d():
    import torch
    import customops
    from exporting import export

    class DeformConv(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.ones(4, 3, 3, 3))

        def forward(self, x, offset, mask):
            return customops.deform_conv2d(x, offset, self.weight, padding=(1, 1), mask=mask)

    args = (torch.ones(1, 3, 6, 6), torch.zeros(1, 18, 6, 6), torch.ones(1, 9, 6, 6))
    return export(DeformConv(), args, dynamo=False,
                  input_names=["input", "offset", "mask"], output_names=["output"])


def _my_add():
    import torch
    import customops
    from exporting import export

    class MyAdd(torch.nn.Module):
        def forward(self, a, b):
            return customops.my_add(a, b)

    return export(MyAdd(), (torch.ones(2, 3), torch.ones(2, 3)), dynamo=False,
                  input_names=["a", "b"], output_names=["c"])


def _knnquery():
    import torch
    import customops
    from exporting import export

    class KNN(torch.nn.Module):
        def forward(self, xyz, offset):
            return customops.knn_query(4, xyz, offset)

    xyz, offset = torch.arange(30.0).reshape(10, 3), torch.tensor([6, 10], dtype=torch.int32)
    return export(KNN(), (xyz, offset), dynamo=False,
                  input_names=["xyz", "offset"], output_names=["idx", "dist"])


def _selu_function():
    """Notebook 05's fix: an onnxscript function at opset 18, called from a
    symbolic for aten::selu with g.onnxscript_op, TorchScript exporter; the
    model keeps the function in model.functions."""
    import torch
    from exporting import export
    from onnxscript import opset18 as op

    alpha, gamma = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946
    custom_opset = onnxscript.values.Opset(domain="custom-onnx-script", version=1)

    @onnxscript.script(custom_opset, default_opset=op)
    def Selu(X: TFloat) -> TFloat:
        alphaX = op.CastLike(alpha, X)
        gammaX = op.CastLike(gamma, X)
        neg = gammaX * (alphaX * op.Exp(X) - alphaX)
        pos = gammaX * X
        zeroX = op.CastLike(0, X)
        return op.Where(X <= zeroX, neg, pos)

    def selu_symbolic(g, x):
        return g.onnxscript_op(Selu, x).setType(x.type())

    # Registered for this export only: the registry is global to the process.
    torch.onnx.register_custom_op_symbolic("aten::selu", selu_symbolic, 18)
    try:
        return export(torch.nn.SELU(), (torch.zeros(2, 3),), dynamo=False, opset_version=18,
                      custom_opsets={"custom-onnx-script": 1},
                      input_names=["x"], output_names=["y"])
    finally:
        torch.onnx.unregister_custom_op_symbolic("aten::selu", 18)


@dataclass
class Case:
    build: Callable[[], onnx.ModelProto]
    op_type: str
    domain: str          # what Netron shows as "module" (a prefix for standard ops)
    function: bool = False
    outputs: list[str] = field(default_factory=list)


def _ours(build, name, outputs):
    return Case(build, OPS[name].onnx_name, DOMAIN, outputs=outputs)


CASES = {
    "asinh": Case(_asinh, "Asinh", "ai.onnx", outputs=["y"]),
    "deform_conv2d": _ours(_deform_conv2d, "deform_conv2d", ["output"]),
    "my_add": _ours(_my_add, "my_add", ["c"]),
    "knnquery": _ours(_knnquery, "knn_query", ["idx", "dist"]),
    "selu_function": Case(_selu_function, "Selu", "custom-onnx-script", function=True,
                          outputs=["y"]),
}


# --- Netron -----------------------------------------------------------------------------


def _type_string(value: onnx.ValueInfoProto) -> str | None:
    """Netron's tooltip for a graph input/output: float32[10,4]."""
    tensor = value.type.tensor_type
    if not value.type.HasField("tensor_type") or not tensor.elem_type:
        return None
    dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type).name
    dims = [d.dim_param or str(d.dim_value) for d in tensor.shape.dim]
    return f"{dtype}[{','.join(dims)}]"


def _static_shape_label(value: onnx.ValueInfoProto) -> str | None:
    dims = value.type.tensor_type.shape.dim
    if not dims or any(not d.HasField("dim_value") for d in dims):
        return None
    return "×".join(str(d.dim_value) for d in dims)


@pytest.fixture
def netron_url():
    """Serves a model path with customops.notebook.graph.netron_serve (what the
    notebooks' netron_view calls); returns the URL and stops the server after
    the test."""
    from customops.notebook.graph import netron_serve
    import netron

    addresses = []

    def serve(path: Path) -> str:
        url = netron_serve(str(path))
        parts = urlsplit(url)
        assert parts.hostname in ("localhost", "127.0.0.1"), url
        addresses.append((parts.hostname, parts.port))
        return url

    yield serve
    root, quiet = logging.getLogger(), logging.NullHandler()
    root.addHandler(quiet)  # netron.stop logs at INFO; see netron_serve
    try:
        for address in addresses:
            netron.stop(address)
    finally:
        root.removeHandler(quiet)


def node_properties(page, node_element) -> dict[str, dict[str, list[str]]]:
    """Clicks a drawn node and reads its properties from the sidebar."""
    node_element.locator(".node-item-type").first.click()
    sidebar = page.locator("#sidebar")
    page.wait_for_selector("#sidebar-content .sidebar-item")
    assert sidebar.locator("#sidebar-title").text_content().strip().lower() == "node properties"
    return browser.parse_sidebar(page.locator("#sidebar-content").inner_html())


@pytest.mark.parametrize("name", CASES)
def test_netron_draws_the_custom_node(name, page, netron_url, tmp_path):
    case = CASES[name]
    model = case.build()
    [node] = [n for n in model.graph.node if n.op_type == case.op_type]
    assert node.name, "the exporters name every node; Netron shows the name"
    assert list(node.output) == case.outputs
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, path)

    browser.open_in_netron(page, netron_url(path))

    # Every node of the graph is drawn, with its op type as the node's label.
    labels = browser.texts(page.locator("#nodes g.graph-node > g.node-item-type:first-child > text"))
    assert sorted(labels) == sorted(n.op_type for n in model.graph.node)

    # Our node: op type as label, node name as tooltip.
    element = page.locator(f'#nodes g.graph-node[id="node-name-{node.name}"]')
    assert element.count() == 1, f"no drawn node with id node-name-{node.name}"
    first_item = element.locator("g.node-item-type").first
    assert first_item.locator("text").text_content() == case.op_type
    assert first_item.locator("title").text_content() == node.name

    # Graph inputs and outputs with their types; an edge (labelled with its
    # shape when static) into each graph output, here our node's outputs.
    drawn_inputs = browser.texts(page.locator("#nodes g.graph-item-input > text"))
    assert sorted(drawn_inputs) == sorted(v.name for v in model.graph.input)
    outputs = page.locator("#nodes g.graph-item-output")
    assert sorted(browser.texts(outputs.locator("text"))) == sorted(case.outputs)
    types = dict(zip(browser.texts(outputs.locator("text")), browser.texts(outputs.locator("title"))))
    for value in model.graph.output:
        assert types[value.name] == _type_string(value), value.name
    for value in model.graph.output:
        assert page.locator(f'#edge-paths path[id="edge-{value.name}"]').count() == 1, value.name
        label = _static_shape_label(value)
        if label:
            assert page.locator(f'[id="edge-label-edge-{value.name}"]').text_content() == label

    # The domain: in the node's properties, row "module".
    properties = node_properties(page, element)
    top = properties[""]
    assert top["type"] == [case.op_type], top
    assert top["name"] == [node.name], top
    assert len(top["module"]) == 1 and top["module"][0].split(" ")[0] == case.domain, top
    if not node.domain:
        assert re.fullmatch(r"ai\.onnx v\d+", top["module"][0]), top
    assert sorted(properties.get("Attributes", {})) == sorted(a.name for a in node.attribute)
    shown_outputs = [v.removeprefix("name: ") for values in properties["Outputs"].values()
                     for v in values]
    assert shown_outputs == case.outputs
    page.screenshot(path=tmp_path / f"netron_{name}.png")

    if name == "knnquery":
        assert properties["Attributes"]["nsample"] == ["4"]
        if os.environ.get("CUSTOMOPS_DOCS_SCREENSHOTS"):
            DOCS.mkdir(exist_ok=True)
            page.screenshot(path=DOCS / "netron_knnquery.png")

    if case.function:
        # Drawn as a function call ("ƒ" opens the definition), and the body
        # kept in model.functions is listed and can be drawn.
        items = element.locator("g.node-item-type")
        assert browser.texts(items.locator("text")) == [case.op_type, "ƒ"]
        assert items.nth(1).locator("title").text_content() == "Show Function Definition"
        [function] = model.functions
        assert (function.domain, function.name) == (case.domain, case.op_type)
        selector = page.locator("#toolbar-target-selector")
        assert function.name in browser.texts(selector.locator("option"))
        page.locator("#sidebar-closebutton").click()
        selector.select_option(label=function.name)
        body = [n.op_type for n in function.node if n.op_type != "Constant"]  # constants become attributes
        body_labels = page.locator("#nodes g.graph-node > g.node-item-type:first-child > text")
        page.locator('#nodes g.graph-node > g.node-item-type:first-child > text:text-is("Where")').wait_for()
        assert sorted(browser.texts(body_labels)) == sorted(body)
        page.screenshot(path=tmp_path / f"netron_{name}_body.png")


# --- JupyterLab ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    server = browser.JupyterLab(NOTEBOOKS, tmp_path_factory.mktemp("jupyterlab"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


def course_notebooks() -> list[str]:
    return sorted(p.name for p in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))


def title_of(notebook: str) -> str:
    cells = json.loads((NOTEBOOKS / notebook).read_text())["cells"]
    first = "".join(cells[0]["source"]).splitlines()[0]
    assert cells[0]["cell_type"] == "markdown" and first.startswith("# "), first
    return first[2:].strip()


def test_jupyterlab_lists_the_course_in_order_and_opens_00(lab, page, tmp_path):
    notebooks = course_notebooks()
    assert notebooks and notebooks[0].startswith("00_")
    assert [int(n[:2]) for n in notebooks] == list(range(len(notebooks))), notebooks

    page.goto(f"{lab.url}/lab?token={lab.token}")
    listing = page.locator(".jp-DirListing-content .jp-DirListing-item")
    listing.filter(has_text=notebooks[-1]).wait_for()
    shown = browser.texts(listing.locator(".jp-DirListing-itemText"))
    # The course, in order, one block, and no notebook listed before 00.
    course = [i for i, n in enumerate(shown) if re.fullmatch(r"\d\d_.*\.ipynb", n)]
    assert [shown[i] for i in course] == notebooks, shown
    assert course == list(range(course[0], course[0] + len(course))), shown
    assert next(n for n in shown if n.endswith(".ipynb")) == notebooks[0], shown

    listing.filter(has_text=notebooks[0]).dblclick()
    heading = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-RenderedMarkdown h1").first
    heading.wait_for()
    assert title_of(notebooks[0]) in heading.text_content()
    page.screenshot(path=tmp_path / "jupyterlab_00.png")


def test_a_course_notebook_runs_in_the_labs_kernel(lab, tmp_path):
    """00_overview (about 20 s) runs cell by cell through the server's REST
    API and kernel websocket.  The kernel first moves to a temporary folder,
    so the models the notebook writes stay out of the checkout."""
    notebook = course_notebooks()[0]
    cells = json.loads((NOTEBOOKS / notebook).read_text())["cells"]
    sources = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
    setup = f"import os; os.chdir({str(tmp_path)!r})"
    results = lab.run_cells([setup, *sources], timeout=240)
    failed = [r for r in results if r["status"] != "ok"]
    assert not failed, (f"{notebook}: cell failed:\n{failed[0]['source'][:500]}\n"
                        + "\n".join(failed[0]["error"]["traceback"] if failed[0]["error"] else []))
    assert len(results) == len(sources) + 1
    # The notebook's own check ran in the lab's kernel: it printed its
    # checker and ORT-against-torch line.
    streams = "".join(r["stream"] for r in results)
    assert "checker ok; ORT and torch" in streams, streams[-2000:]


def _png_size(png: bytes) -> tuple[int, int]:
    assert png[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")


def test_static_picture_holds_the_whole_graph(netron_url, tmp_path):
    """The picture netron_view stores in a notebook (customops.notebook.browser.netron_png)
    is the whole graph, however tall: a chain of 30 nodes draws taller than
    the window and taller than a chain of 2."""
    from customops.notebook.browser import VIEWPORT, netron_png
    from onnx import TensorProto, helper

    def chain(length):
        nodes = [helper.make_node("Relu", [f"v{i}"], [f"v{i + 1}"]) for i in range(length)]
        inputs = [helper.make_tensor_value_info("v0", TensorProto.FLOAT, [2])]
        graph = helper.make_graph(nodes, "chain", inputs,
                                  [helper.make_tensor_value_info(f"v{length}", TensorProto.FLOAT, [2])])
        path = tmp_path / f"chain{length}.onnx"
        onnx.save(helper.make_model(graph), path)
        return _png_size(netron_png(netron_url(path)))

    short, tall = chain(2), chain(30)
    assert tall[1] > VIEWPORT["height"] and tall[1] > 3 * short[1], (short, tall)
