"""Look at an ONNX graph from a notebook: a node table, and Netron.

    from customops.notebook.graph import print_nodes, netron_view
    print_nodes(onnx_model)      # one line per node: op, inputs, outputs, attributes
    netron_view(onnx_model)      # a static picture drawn by Netron, then the live Netron
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

import onnx


def _attribute(attr: onnx.AttributeProto) -> str:
    value = onnx.helper.get_attribute_value(attr)
    if isinstance(value, onnx.TensorProto):
        array = onnx.numpy_helper.to_array(value)
        value = array.tolist() if array.size <= 8 else f"tensor{list(array.shape)}"
    elif isinstance(value, bytes):
        value = value.decode()
    return f"{attr.name}={value}"


def _type(value_info: onnx.ValueInfoProto) -> str:
    tensor = value_info.type.tensor_type
    if not value_info.type.HasField("tensor_type"):
        return "?"
    dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type).name if tensor.elem_type else "?"
    if not tensor.HasField("shape"):
        return dtype
    dims = [d.dim_param or (str(d.dim_value) if d.HasField("dim_value") else "?")
            for d in tensor.shape.dim]
    return f"{dtype}[{','.join(dims)}]"


def print_nodes(model: onnx.ModelProto) -> None:
    """Prints the opsets, the graph's inputs and outputs with their types, and
    one row per node: domain::op, inputs -> outputs, attributes."""
    graph = model.graph
    opsets = ", ".join(f"{o.domain or 'ai.onnx'} {o.version}" for o in model.opset_import)
    print(f"opsets: {opsets}")
    print("inputs: " + ", ".join(f"{v.name}: {_type(v)}" for v in graph.input))
    print("outputs: " + ", ".join(f"{v.name}: {_type(v)}" for v in graph.output))
    for i, node in enumerate(graph.node):
        op = f"{node.domain or 'ai.onnx'}::{node.op_type}"
        inputs = ", ".join(name or "<absent>" for name in node.input)
        attrs = ", ".join(_attribute(a) for a in node.attribute if a.name != "value")
        if node.op_type == "Constant":
            attrs = ", ".join(_attribute(a) for a in node.attribute)
        line = f"{i:3d}  {op:<28} ({inputs}) -> ({', '.join(node.output)})"
        print(line + (f"  {attrs}" if attrs else ""))
    for function in model.functions:
        ops = ", ".join(f"{n.domain or 'ai.onnx'}::{n.op_type}" for n in function.node)
        print(f"function {function.domain}::{function.name}: {ops}")


def netron_serve(model, name: str = "model.onnx") -> str:
    """Serves the model with Netron on localhost (in a background thread, so
    the notebook never blocks) and returns its address."""
    import netron

    if isinstance(model, onnx.ModelProto):
        folder = Path(tempfile.mkdtemp(prefix="netron-"))
        path = folder / name
        onnx.save(model, path)
    else:
        path = Path(os.fspath(model))
    # netron.start calls logging.basicConfig(level=INFO) when the root logger
    # has no handler, which would turn on every library's INFO messages for
    # the rest of the session.  A temporary handler keeps it from doing so.
    root, quiet = logging.getLogger(), logging.NullHandler()
    root.addHandler(quiet)
    try:
        host, port = netron.start(str(path), address=("localhost", 0), browse=False)
    finally:
        root.removeHandler(quiet)
    return f"http://{host}:{port}"


def netron_view(model, name: str = "model.onnx", height: int = 500, static: bool = True):
    """Serves the model with Netron and returns an IFrame showing it live
    (JupyterLab); the printed address also opens in a browser tab.  With
    ``static`` it first displays a PNG of the same view drawn by Netron in
    headless Chromium (customops.notebook.browser), which stays in the saved notebook
    for readers on GitHub or nbviewer, where the live view is blank."""
    from IPython.display import IFrame, Image, display

    url = netron_serve(model, name)
    if static:
        from .browser import missing_chromium_message, netron_png

        problem = missing_chromium_message()
        if problem:
            print(f"no static picture: {problem}")
        else:
            display(Image(netron_png(url)))
    print(f"Netron is showing {name if isinstance(model, onnx.ModelProto) else Path(model).name}"
          f" at {url}")
    return IFrame(url, width="100%", height=height)
