"""Ask the installed onnxruntime what it accepts, one tiny session at a time.

The doctor (customops.doctor) decides nothing from tables of supported ops:
each question is a small model loaded into a real ``InferenceSession``, and
the answer is whether it loads and, if not, ORT's own message.  So the
answers stay right when onnxruntime changes.  Imports only onnx,
onnxruntime, numpy and the standard library (no torch).
"""

from __future__ import annotations

import functools
import importlib.machinery
import importlib.util
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
from onnx import TensorProto, helper, numpy_helper

from ..ort import library_path

# Domains whose ops ORT runs without any custom-op library.
STANDARD_DOMAINS = ("", "ai.onnx", "ai.onnx.ml")
# Element types tried when looking for the ones a kernel accepts (no complex,
# float8 or 4-bit types: no CPU kernel to find there).
ELEMENT_TYPES = [t for t in TensorProto.DataType.values() if t not in (
    TensorProto.UNDEFINED, TensorProto.COMPLEX64, TensorProto.COMPLEX128)
    and t < TensorProto.FLOAT8E4M3FN]
SAFE_OPSET = 13  # an ai.onnx opset every supported runtime reads, for models with no nodes
SMALL_CONSTANT = 16  # constants up to this many elements go into probes as values, not types


def type_name(elem_type: int) -> str:
    """ORT's spelling of a tensor type: tensor(float), tensor(int64)..."""
    return f"tensor({TensorProto.DataType.Name(elem_type).lower()})"


def first_line(error) -> str:
    """ORT's message without the '[ONNXRuntimeError] : 1 :' prefix and the C++
    source location and signature some messages start with."""
    text = str(error).strip()
    match = re.match(r"\[ONNXRuntimeError\] : \d+ : (\w+) : (.*)", text, re.S)
    code, text = match.groups() if match else ("", text)
    text = (text.strip().splitlines() or [""])[0]
    if re.match(r"\S+\.(cc|h|cpp):\d+ ", text):  # file:line Namespace::Function(args) message
        depth, start = 0, text.find("(")
        for i in range(start, len(text)):
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            if depth == 0:
                text = text[i + 1:].strip()
                break
    return f"{code}: {text}" if code else text


@dataclass
class Outcome:
    """Whether a model loaded; ORT's message if not; the output types if so."""

    ok: bool
    message: str = ""
    outputs: dict = field(default_factory=dict)  # name -> onnx.TypeProto ORT inferred


@dataclass(frozen=True)
class Library:
    """A custom-op library: where it is and how a user registers it from Python."""

    name: str
    path: str
    python: str  # the expression that gives its path in Python

    def registration(self) -> str:
        return f"options.register_custom_ops_library({self.python})"

    def elsewhere(self) -> str:
        shown = shown_path(self.path)
        return (f'C++: session_options.RegisterCustomOpsLibrary(ORT_TSTR("{shown}")); '
                f"CLI: onnxruntime_perf_test -R {shown}")


def shown_path(path: str) -> str:
    """A path as a user would type it here: relative to the current directory
    (so a notebook's output names no directory of the machine it ran on)."""
    try:
        return os.path.relpath(path)
    except ValueError:  # another drive (Windows)
        return path


def takes_path(path) -> bool:
    """Whether onnxruntime's Python binding can take ``path``: only valid
    UTF-8 (onnxruntime 1.31.1 raises a TypeError for other bytes)."""
    try:
        os.fsencode(path).decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def printable(path) -> str:
    """A path as text that prints anywhere: bytes that are not UTF-8 appear
    as \\xNN escapes (the surrogates Python decodes them to cannot be printed)."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def known_libraries() -> list[Library]:
    """The libraries the doctor can suggest: ours, if built, and
    onnxruntime-extensions, if installed.  The extensions' path is found
    without importing the package (its __init__ imports torch when present)."""
    found = []
    try:
        found.append(Library("customops", library_path(), "customops.ort.library_path()"))
    except FileNotFoundError:  # not built
        pass
    spec = importlib.util.find_spec("onnxruntime_extensions")
    if spec and spec.submodule_search_locations:
        for folder in spec.submodule_search_locations:
            for suffix in importlib.machinery.EXTENSION_SUFFIXES:
                path = Path(folder) / f"_extensions_pydll{suffix}"
                if path.is_file():
                    found.append(Library("onnxruntime-extensions", str(path),
                                         "onnxruntime_extensions.get_library_path()"))
                    return found
    return found


def ort_type(node_arg) -> onnx.TypeProto | None:
    """An onnx TypeProto from a session's input or output ('tensor(float)' and
    its shape); None for other kinds of values."""
    match = re.fullmatch(r"tensor\((\w+)\)", node_arg.type)
    if not match or match[1].upper() not in TensorProto.DataType.keys():
        return None
    # ORT reports an unknown shape as [], like a scalar's: take it as unknown.
    shape = node_arg.shape if isinstance(node_arg.shape, list) and node_arg.shape else None
    return helper.make_tensor_type_proto(TensorProto.DataType.Value(match[1].upper()), shape)


class Runtime:
    """The installed onnxruntime, questioned through throw-away sessions."""

    def __init__(self):
        self.version = onnxruntime.__version__

    def load(self, model, libraries=(), optimize=False) -> Outcome:
        """Load ``model`` (ModelProto, bytes or path) with ``libraries`` registered."""
        options = onnxruntime.SessionOptions()
        options.log_severity_level = 4  # the doctor reports errors itself; keep stderr quiet
        if not optimize:
            options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
        try:
            if isinstance(model, onnx.ModelProto):
                model = model.SerializeToString()  # fails above 2 GB: an answer too
            elif not isinstance(model, bytes):
                model = os.fspath(model)
            for library in libraries:
                options.register_custom_ops_library(library)
            session = onnxruntime.InferenceSession(model, options,
                                                   providers=["CPUExecutionProvider"])
            # Names that are not UTF-8 fail here (pybind11 decodes them)
            types = {o.name: ort_type(o) for o in session.get_outputs()}
        except Exception as error:  # noqa: BLE001  every ORT failure is an answer here
            return Outcome(False, first_line(error))
        return Outcome(True, outputs={k: v for k, v in types.items() if v is not None})

    def _empty_model(self, opsets: dict, ir_version: int) -> onnx.ModelProto:
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
        graph = helper.make_graph([], "probe", [x], [x])
        return helper.make_model(graph, ir_version=ir_version, opset_imports=[
            helper.make_opsetid(d, v) for d, v in opsets.items()])

    @functools.cached_property
    def max_ir_version(self) -> int:
        """The highest IR version this runtime loads, found by loading an empty
        model at descending IR versions (ORT has no API for it)."""
        for ir in range(onnx.IR_VERSION + 4, 2, -1):
            if self.load(self._empty_model({"": SAFE_OPSET}, ir)).ok:
                return ir
        raise RuntimeError(f"onnxruntime {self.version} loads no model at all")

    def opset_problem(self, domain: str, version: int) -> str | None:
        """ORT's message if it refuses a model importing ``domain`` at ``version``."""
        opsets = {"": SAFE_OPSET, domain: version}
        outcome = self.load(self._empty_model(opsets, self.max_ir_version))
        return None if outcome.ok else outcome.message

    def max_opset(self, domain: str, below: int) -> int | None:
        """The highest version of ``domain`` below ``below`` this runtime
        accepts: the one ORT names when it refuses ``below`` ("... is till
        opset 26"), if that loads, else found by bisection (ORT accepts every
        version up to its highest), so an opset of 10**9 costs about 30 loads,
        not a billion."""
        said = re.search(r"is till opset (\d+)", self.opset_problem(domain, below) or "")
        if said and 0 < int(said[1]) < below and self.opset_problem(domain, int(said[1])) is None:
            return int(said[1])
        low, high = 0, below  # low loads (0: none found yet), high does not
        while high - low > 1:
            middle = (low + high) // 2
            if self.opset_problem(domain, middle) is None:
                low = middle
            else:
                high = middle
        return low or None

    def library_problem(self, path: str, others=()) -> str | None:
        """ORT's message if registering ``path`` (after ``others``) fails."""
        model = self._empty_model({"": SAFE_OPSET}, self.max_ir_version)
        outcome = self.load(model, [*others, path])
        return None if outcome.ok else outcome.message


def generalized(type_proto: onnx.TypeProto, prefix: str) -> onnx.TypeProto:
    """The same type with every dimension a fresh symbol: a probe asks about
    kernels and types, not about one model's sizes."""
    general = onnx.TypeProto()
    general.CopyFrom(type_proto)
    if general.HasField("tensor_type") and general.tensor_type.HasField("shape"):
        for i, dim in enumerate(general.tensor_type.shape.dim):
            dim.Clear()
            dim.dim_param = f"{prefix}_{i}"
    return general


def node_model(node: onnx.NodeProto, inputs: list, opsets: dict, functions=(),
               ir_version: int = 8) -> onnx.ModelProto:
    """A model made of ``node`` alone.  ``inputs`` holds, per node input, a
    TypeProto (the value becomes a graph input), a TensorProto (a small
    constant, kept as an initializer: some kernels read such values when the
    session is created) or None for an absent optional input."""
    graph_inputs, initializers, seen = [], [], set()
    for i, (name, value) in enumerate(zip(node.input, inputs)):
        if not name or name in seen:
            continue
        seen.add(name)
        if isinstance(value, TensorProto):
            constant = TensorProto()
            constant.CopyFrom(value)
            constant.name = name
            initializers.append(constant)
        else:
            graph_inputs.append(helper.make_value_info(name, generalized(value, f"in{i}")))
    outputs = [helper.make_empty_tensor_value_info(name) for name in node.output if name]
    graph = helper.make_graph([node], "probe", graph_inputs, outputs, initializers)
    return helper.make_model(graph, ir_version=ir_version, functions=list(functions),
                             opset_imports=[helper.make_opsetid(d, v) for d, v in opsets.items()])


# -- what a node's inputs are, as a probe needs them -------------------------

def type_text(value) -> str:
    """ORT's spelling of the type of a TypeProto or TensorProto."""
    if isinstance(value, TensorProto):
        return type_name(value.data_type)
    if value.HasField("tensor_type"):
        return type_name(value.tensor_type.elem_type)
    return "non-tensor"


def elem_type(value) -> int:
    """The element type of a TypeProto or TensorProto (0 if not a tensor)."""
    if isinstance(value, TensorProto):
        return value.data_type
    return value.tensor_type.elem_type if value.HasField("tensor_type") else 0


def with_elem(value, elem: int) -> onnx.TypeProto:
    """A tensor type of ``value``'s rank with element type ``elem``."""
    dims = list(value.dims) if isinstance(value, TensorProto) else (
        [None] * len(value.tensor_type.shape.dim) if value.tensor_type.HasField("shape") else None)
    return helper.make_tensor_type_proto(elem, dims)


def declared_types(model: onnx.ModelProto) -> dict:
    """Value name -> TypeProto, from the model and onnx's shape inference
    (which knows the standard ops, not the custom ones)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001  an inference error is ORT's to report, per node
        inferred = model
    graph = inferred.graph
    types = {vi.name: vi.type for vi in [*graph.input, *graph.value_info, *graph.output]
             if elem_type(vi.type) or vi.type.HasField("sequence_type")}
    for tensor in model.graph.initializer:
        types[tensor.name] = helper.make_tensor_type_proto(tensor.data_type, list(tensor.dims))
    return types


def small_constants(model: onnx.ModelProto) -> dict:
    """Value name -> TensorProto (unnamed) for the initializers and Constant
    outputs of at most SMALL_CONSTANT elements."""
    found = {}
    for tensor in model.graph.initializer:
        found[tensor.name] = tensor
    for node in model.graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and node.attribute:
            attr = node.attribute[0]
            if attr.name == "value":
                found[node.output[0]] = attr.t
            elif attr.name in ("value_int", "value_ints", "value_float", "value_floats"):
                found[node.output[0]] = numpy_helper.from_array(
                    np.asarray(helper.get_attribute_value(attr)))
    small = {}
    for name, tensor in found.items():
        if tensor.data_location != TensorProto.EXTERNAL and \
                np.prod(tensor.dims, dtype=int) <= SMALL_CONSTANT:
            copy = TensorProto()
            copy.CopyFrom(tensor)
            copy.name = ""
            small[name] = copy
    return small
