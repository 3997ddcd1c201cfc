"""Hostile model files: edge cases made by hand and mutations of seed models.

A case is a folder holding model.onnx (and the external data file of a seed
that has one), the inputs the seed was built for (inputs/NAME.npy and
inputs.npz) and an empty out/.  The seeds are built here: one single-node
model per op of tests/optable.py, a standard op feeding a custom one, the
seeds' KNNQuery with a constant input, a model with external data; with
``notebooks`` also notebooks/models/*.onnx (when the notebooks have run).

Cases 0 .. len(EDGES)-1 are the edge cases; case K after those applies one
mutation, drawn from a generator seeded with (S, K), to one seed: flipped
bytes, a cut, one protobuf field changed, an output renamed to an input's
name.  So (S, K) names the same file on every machine and run.
tests/model_fuzz.py runs the tools on them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, helper, numpy_helper

from customops.builder import IR_VERSION, single_node_model
from customops.ort import DOMAIN, OPSET_VERSION
from optable import OPS

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK_MODELS = ROOT / "notebooks" / "models"
DATA = "weights.bin"  # the external data file of the seed that has one
F32 = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
NOT_UTF8 = b"n\xe1\x80o\xff\xfe8"  # 7 bytes that are no UTF-8 text (0xe1 as in the issue)


# -- the files of one case ----------------------------------------------------

@dataclass
class Seed:
    name: str
    model: bytes                 # serialized ModelProto
    inputs: dict                 # name -> array the model was built for
    data: bytes | None = None    # external data file beside it, if any


@dataclass
class Case:
    """One case's files, written into ``folder``."""

    number: int     # K
    key: str        # how to replay it: "seed S case K"
    what: str       # the seed and the mutation
    folder: Path

    @property
    def model(self) -> Path:
        return self.folder / "model.onnx"

    @property
    def inputs(self) -> dict:  # name -> .npy path
        return {p.stem: p for p in sorted((self.folder / "inputs").glob("*.npy"))}

    @property
    def npz(self) -> Path:
        return self.folder / "inputs.npz"

    @property
    def out(self) -> Path:
        return self.folder / "out"


def write_case(folder: Path, seed: Seed, model: bytes) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.onnx").write_bytes(model)
    if seed.data is not None:
        (folder / DATA).write_bytes(seed.data)
    (folder / "inputs").mkdir(exist_ok=True)
    for name, array in seed.inputs.items():
        np.save(folder / "inputs" / f"{name}.npy", array)
    np.savez(folder / "inputs.npz", **seed.inputs)


# -- seeds -------------------------------------------------------------------

def serialized(model: onnx.ModelProto) -> bytes:
    return model.SerializeToString()


def op_seed(op) -> Seed:
    """A single-node model of an op of the table, with its base inputs."""
    inputs = {k: v for k, v in op.base.inputs.items() if v is not None}
    model = single_node_model(op.onnx_name, op.declared(op.base.inputs), op.output_names,
                              **op.base.attrs)
    return Seed(op.name, serialized(model), inputs)


def chain_seed() -> Seed:
    """A standard op feeding a custom one: Relu -> my_add."""
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    relu = helper.make_node("Relu", ["x"], ["r"], name="relu")
    model = single_node_model("my_add", {"r": ..., "x": x}, ["y"], extra_nodes=[relu])
    model.graph.node[-1].name = "add"
    return Seed("chain", serialized(model), {"x": x})


def constant_input_seed() -> Seed:
    """The seeds' KNNQuery: nsample as a Constant input (the doctor's attribute path)."""
    knn = OPS["knn_query"]
    constant = helper.make_node("Constant", [], ["k"], name="/Constant",
                                value=helper.make_tensor("v", TensorProto.INT64, [], [2]))
    inputs = {k: knn.base.inputs[k] for k in ("xyz", "offset")}
    model = single_node_model(knn.onnx_name, {"k": ..., **knn.declared(inputs)},
                              knn.output_names, extra_nodes=[constant])
    return Seed("knn-constant-input", serialized(model), inputs)


def function_model() -> onnx.ModelProto:
    """A node calling a model-local function, local::F, whose body is one Relu."""
    function = helper.make_function("local", "F", ["X"], ["Y"], [
        helper.make_node("Relu", ["X"], ["Y"])], [helper.make_opsetid("", 17)])
    model = single_node_model("F", {"x": F32}, ["y"], domain="local", opset=17)
    model.functions.append(function)
    model.opset_import.append(helper.make_opsetid("local", 1))
    return model


def function_seed() -> Seed:
    return Seed("function", serialized(function_model()), {"x": F32})


def subgraph_seed() -> Seed:
    """An If whose branches run Relu or the custom my_add on an outer value."""
    def branch(name, node):
        return helper.make_graph([node], name, [], [helper.make_empty_tensor_value_info(
            node.output[0])])

    node = helper.make_node(
        "If", ["c"], ["y"], name="if",
        then_branch=branch("then", helper.make_node("Relu", ["x"], ["t"])),
        else_branch=branch("else", helper.make_node("my_add", ["x", "x"], ["e"], domain=DOMAIN)))
    model = single_node_model("If", {"c": np.array(True), "x": F32}, ["y"], domain="")
    model.graph.ClearField("node")
    model.graph.node.append(node)
    model.opset_import.append(helper.make_opsetid(DOMAIN, OPSET_VERSION))
    return Seed("subgraph", serialized(model), {"c": np.array(True), "x": F32})


def external_data_model(location: str, offset: int = 0, length: int | None = None):
    """x + w with the 4x4 weights w kept in the file ``location`` (relative to the model)."""
    weights = np.arange(16, dtype=np.float32).reshape(4, 4)
    tensor = numpy_helper.from_array(weights, "w")
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    entries = {"location": location, "offset": str(offset),
               "length": str(weights.nbytes if length is None else length)}
    for key, value in entries.items():
        tensor.external_data.add(key=key, value=value)
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"], name="add")], "external",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 4])], [tensor])
    model = helper.make_model(graph, ir_version=IR_VERSION,
                              opset_imports=[helper.make_opsetid("", 17)])
    return model, {"x": np.ones((4, 4), np.float32)}, weights.tobytes()


def external_seed() -> Seed:
    model, inputs, data = external_data_model(DATA)
    return Seed("external-data", serialized(model), inputs, data)


def notebook_seeds() -> list[Seed]:
    """The models the notebooks saved (none before they ran), without inputs."""
    return [Seed(f"notebooks/{p.name}", p.read_bytes(), {})
            for p in sorted(NOTEBOOK_MODELS.glob("*.onnx"))]


def seeds(notebooks: bool = False) -> list[Seed]:
    return [*map(op_seed, OPS.values()), chain_seed(), constant_input_seed(), function_seed(),
            subgraph_seed(), external_seed(), *(notebook_seeds() if notebooks else [])]


# -- hand-made edge cases -----------------------------------------------------

def with_raw_string(model: onnx.ModelProto, set_field: Callable, raw: bytes = NOT_UTF8) -> bytes:
    """``model`` serialized with string fields holding ``raw`` (bytes protobuf
    will not store from Python): ``set_field`` sets them to a placeholder of
    the same length, whose bytes are then replaced."""
    placeholder = "Zq" + "#" * (len(raw) - 2)
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    set_field(copy, placeholder)
    data = copy.SerializeToString()
    assert placeholder.encode() in data, placeholder  # every field set to it gets the bytes
    return data.replace(placeholder.encode(), raw)


def knn_seed_model() -> tuple[onnx.ModelProto, dict]:
    """The knn_query seed (an op with inputs, outputs and an attribute), to edit."""
    seed = op_seed(OPS["knn_query"])
    return onnx.load_from_string(seed.model), seed.inputs


def _set_first_input(model, name):
    """Renames graph input 0 everywhere it is used."""
    old = model.graph.input[0].name
    model.graph.input[0].name = name
    for node in model.graph.node:
        node.input[:] = [name if i == old else i for i in node.input]


def _set_output(model, name):
    old = model.graph.output[0].name
    model.graph.output[0].name = name
    for node in model.graph.node:
        node.output[:] = [name if o == old else o for o in node.output]


def _meta(model, key, value):
    entry = model.metadata_props.add()
    entry.key, entry.value = key, value


# Fields given bytes that are not UTF-8: (name, how to set the field).
NOT_UTF8_FIELDS = {
    "node-name": lambda m, s: setattr(m.graph.node[0], "name", s),
    "op-type": lambda m, s: setattr(m.graph.node[0], "op_type", s),
    "domain": lambda m, s: setattr(m.graph.node[0], "domain", s),
    "attribute-name": lambda m, s: setattr(m.graph.node[0].attribute[0], "name", s),
    "graph-input": _set_first_input,
    "graph-output": _set_output,
    "opset-domain": lambda m, s: setattr(m.opset_import[-1], "domain", s),
    "graph-name": lambda m, s: setattr(m.graph, "name", s),
    "producer": lambda m, s: setattr(m, "producer_name", s),
    "doc-string": lambda m, s: setattr(m.graph.node[0], "doc_string", s),
    "metadata-key": lambda m, s: _meta(m, s, "v"),
    "metadata-value": lambda m, s: _meta(m, "k", s),
}


def _edited(edit: Callable, make: Callable | None = None) -> Callable:
    """An edge case: the knn seed model (or ``make()``'s (model, inputs))
    after ``edit`` (which changes it in place)."""
    def build():
        model, inputs = (make or knn_seed_model)()
        edit(model)
        return serialized(model), inputs, None
    return build


def _not_utf8(set_field: Callable) -> Callable:
    """An edge case: the knn seed model with a field that ``set_field`` sets holding NOT_UTF8."""
    def build():
        model, inputs = knn_seed_model()
        return with_raw_string(model, set_field), inputs, None
    return build


def _dims(values):
    def edit(model):
        dims = model.graph.input[0].type.tensor_type.shape.dim
        for dim, value in zip(dims, values):
            dim.Clear()
            dim.dim_value = value
    return edit


def _attribute(**fields):
    def edit(model):
        attribute = model.graph.node[0].attribute[0]
        for name, value in fields.items():
            if isinstance(value, list):
                getattr(attribute, name)[:] = value
            else:
                setattr(attribute, name, value)
    return edit


def _cycle(model):
    """Two nodes, each reading the other's output."""
    model.graph.node.append(helper.make_node("Relu", ["idx_f"], ["cycle"], name="relu"))
    model.graph.node.append(helper.make_node("Cast", ["cycle"], ["idx_f"], to=1, name="cast"))
    model.graph.node[0].input[0] = "cycle"


def _duplicate_node(model):
    copy = model.graph.node.add()
    copy.CopyFrom(model.graph.node[0])


def _duplicate_input(model):
    copy = model.graph.input.add()
    copy.CopyFrom(model.graph.input[0])


def _initializer_named_like_output(model):
    model.graph.initializer.append(numpy_helper.from_array(np.zeros(3, np.int32),
                                                           model.graph.output[0].name))


def _huge_initializer_dims(model):
    tensor = numpy_helper.from_array(np.zeros(3, np.float32), "huge")
    tensor.dims[:] = [2**40, 2**40]
    model.graph.initializer.append(tensor)
    model.graph.node.append(helper.make_node("Identity", ["huge"], ["huge_out"]))
    model.graph.output.append(helper.make_empty_tensor_value_info("huge_out"))


def _opset(domain_index, version):
    return lambda model: setattr(model.opset_import[domain_index], "version", version)


def _import(domain, version):
    return lambda model: model.opset_import.append(helper.make_opsetid(domain, version))


def _external(location, offset=0, length=None, data=True):
    def build():
        model, inputs, weights = external_data_model(location, offset, length)
        return serialized(model), inputs, weights if data else None
    return build


INT64_MAX, INT64_MIN = 2**63 - 1, -2**63

# name -> () -> (serialized model, inputs, external data bytes or None)
EDGES = {
    **{f"not-utf8-{field}": _not_utf8(set_field) for field, set_field in NOT_UTF8_FIELDS.items()},
    "dims-huge": _edited(_dims([2**62, 3])),
    "dims-int64-max": _edited(_dims([INT64_MAX, INT64_MAX])),
    "dims-negative": _edited(_dims([-5, 3])),
    "initializer-dims-huge": _edited(_huge_initializer_dims),
    "attribute-ints-for-int": _edited(_attribute(type=AttributeProto.INTS, ints=[2, 3])),
    "attribute-string-for-int": _edited(_attribute(type=AttributeProto.STRING, s=b"2")),
    "attribute-float-for-int": _edited(_attribute(type=AttributeProto.FLOAT, f=2.5)),
    "attribute-tensor-for-int": _edited(_attribute(type=AttributeProto.TENSOR)),
    "attribute-graph-for-int": _edited(_attribute(type=AttributeProto.GRAPH)),
    "attribute-int-huge": _edited(_attribute(i=INT64_MAX)),
    "attribute-int-negative": _edited(_attribute(i=-1)),
    "attribute-undefined": _edited(_attribute(type=AttributeProto.UNDEFINED)),
    "cycle": _edited(_cycle),
    "duplicate-node": _edited(_duplicate_node),
    "duplicate-graph-input": _edited(_duplicate_input),
    "initializer-named-like-output": _edited(_initializer_named_like_output),
    "output-named-like-input": _edited(lambda m: _set_output(m, m.graph.input[0].name)),
    "opset-0": _edited(_opset(0, 0)),
    "opset-negative": _edited(_opset(0, -1)),
    "opset-int64-max": _edited(_opset(0, INT64_MAX)),
    "opset-int64-min": _edited(_opset(0, INT64_MIN)),
    "custom-opset-int64-max": _edited(_opset(-1, INT64_MAX)),
    # onnx's schema lookups take a C int: versions beyond it, in a model whose
    # function body makes the doctor look its ops up (issue: 2^62 was an internal error)
    **{f"function-opset-{name}": _edited(_opset(0, version), lambda: (function_model(), {"x": F32}))
       for name, version in (("2^62", 2**62), ("2^31", 2**31), ("negative", -1),
                             ("million", 10**6))},
    "opset-2^62": _edited(_opset(0, 2**62)),
    "opset-million": _edited(_opset(0, 10**6)),
    "ir-2^62": _edited(lambda m: setattr(m, "ir_version", 2**62)),
    "ir-million": _edited(lambda m: setattr(m, "ir_version", 10**6)),
    "ir-2^31": _edited(lambda m: setattr(m, "ir_version", 2**31)),
    "custom-opset-0": _edited(_opset(-1, 0)),
    "no-opsets": _edited(lambda m: m.ClearField("opset_import")),
    "ir-0": _edited(lambda m: setattr(m, "ir_version", 0)),
    "ir-negative": _edited(lambda m: setattr(m, "ir_version", -1)),
    "ir-1": _edited(lambda m: setattr(m, "ir_version", 1)),
    "ir-int64-max": _edited(lambda m: setattr(m, "ir_version", INT64_MAX)),
    # the edges of the doctor's range checks, where onnxruntime loads some models
    # (IR 0, an opset of 0 no node uses: onnxruntime 1.32.0); doctor-agrees checks them
    "ir-onnx": _edited(lambda m: setattr(m, "ir_version", onnx.IR_VERSION)),
    "ir-above-onnx": _edited(lambda m: setattr(m, "ir_version", onnx.IR_VERSION + 1)),
    "opset-2^40": _edited(_opset(0, 2**40)),
    "custom-opset-2": _edited(_opset(-1, 2)),
    "custom-opset-negative": _edited(_opset(-1, -1)),
    **{f"{domain}-opset-{version}": _edited(_import(domain, version))
       for domain in ("ai.onnx.ml", "unused.domain") for version in (-1, 0, 1, 6, 2**31)},
    "no-nodes": _edited(lambda m: m.graph.ClearField("node")),
    "empty-op-type": _edited(lambda m: setattr(m.graph.node[0], "op_type", "")),
    "external-outside-folder": _external("../outside.bin"),
    "external-absolute": _external("/etc/hostname"),
    "external-missing": _external(DATA, data=False),
    "external-beyond-end": _external(DATA, offset=1 << 20),
    "external-length-negative": _external(DATA, length=-1),
    "external-length-huge": _external(DATA, length=2**62),
}


# -- mutations -----------------------------------------------------------------

def flip_bytes(rng, data: bytes) -> tuple[bytes, str]:
    flipped = bytearray(data)
    positions = rng.integers(0, len(data), int(rng.integers(1, 9)))
    for position in positions:
        flipped[position] ^= int(rng.integers(1, 256))
    return bytes(flipped), f"flip bytes at {sorted(positions.tolist())}"


def truncate(rng, data: bytes) -> tuple[bytes, str]:
    cut = int(rng.integers(0, len(data)))
    return data[:cut], f"cut at {cut} of {len(data)}"


STRINGS = ["", "custom", "ai.onnx", "ai.onnx.ml", "com.microsoft", "Relu", "my_add",
           "knnquery", "deform_conv2d", "x" * 300, "a b\nc", NOT_UTF8]
NUMBERS = [0, 1, -1, 2, 7, 9, 13, 17, 19, 30, 10**6, 2**31 - 1, 2**31, 2**62, INT64_MAX,
           INT64_MIN]


def _pick(rng, values):
    return values[int(rng.integers(0, len(values)))]


def _string_field(rng, model, set_field) -> tuple[bytes, str]:
    value = _pick(rng, STRINGS)
    if isinstance(value, bytes):
        return with_raw_string(model, set_field, value), "bytes that are not UTF-8"
    set_field(model, value)
    return serialized(model), repr(value[:40])


def _first_input(node, name):
    if node.input:
        node.input[0] = name
    else:
        node.input.append(name)


def change_field(rng, data: bytes) -> tuple[bytes, str]:
    """One field of one node or of the model set to an unusual value."""
    model = onnx.load_from_string(data)
    nodes = list(model.graph.node)
    field = _pick(rng, ["domain", "op_type", "attribute type", "first input", "opset",
                        "ir_version"] if nodes else ["opset", "ir_version"])
    index = int(rng.integers(0, max(1, len(nodes))))
    if field in ("domain", "op_type"):
        changed, shown = _string_field(
            rng, model, lambda m, s: setattr(m.graph.node[index], field, s))
    elif field == "first input":
        changed, shown = _string_field(rng, model,
                                       lambda m, s: _first_input(m.graph.node[index], s))
    elif field == "attribute type":
        attributes = nodes[index].attribute
        if not attributes:
            attributes.add(name="extra", type=AttributeProto.INT, i=1)
        attribute = attributes[int(rng.integers(0, len(attributes)))]
        attribute.type = _pick(rng, list(AttributeProto.AttributeType.values()))
        changed, shown = serialized(model), AttributeProto.AttributeType.Name(attribute.type)
    elif field == "opset":
        if not model.opset_import:
            model.opset_import.add(domain="")
        entry = model.opset_import[int(rng.integers(0, len(model.opset_import)))]
        entry.version = _pick(rng, NUMBERS)
        changed, shown = serialized(model), f"{entry.domain or 'ai.onnx'} {entry.version}"
    else:
        model.ir_version = _pick(rng, NUMBERS)
        changed, shown = serialized(model), str(model.ir_version)
    where = "the model" if field in ("opset", "ir_version") else f"node {index}"
    return changed, f"{field} of {where} -> {shown}"


def output_as_input(rng, data: bytes) -> tuple[bytes, str]:
    """A node's output renamed to the name of one of its inputs (or a graph input)."""
    model = onnx.load_from_string(data)
    nodes = [n for n in model.graph.node if n.output]
    if not nodes:
        return flip_bytes(rng, data)
    node = _pick(rng, nodes)
    names = [i for i in node.input if i] or [i.name for i in model.graph.input] or ["x"]
    old, new = node.output[0], _pick(rng, names)
    node.output[0] = new
    for output in model.graph.output:
        if output.name == old:
            output.name = new
    return serialized(model), f"output {old!r} of node {node.name or node.op_type!r} -> {new!r}"


MUTATIONS = [flip_bytes, truncate, change_field, output_as_input]


def make_case(seed_value: int, k: int, corpus: list[Seed], folder: Path) -> Case:
    """Case ``k`` of the run seeded ``seed_value``, written into ``folder``."""
    key = f"seed {seed_value} case {k}"
    edges = list(EDGES)
    if k < len(edges):
        model, inputs, data = EDGES[edges[k]]()
        write_case(folder, Seed(edges[k], model, inputs, data), model)
        return Case(k, key, f"edge case {edges[k]}", folder)
    rng = np.random.default_rng([seed_value, k])
    seed = corpus[int(rng.integers(0, len(corpus)))]
    mutation = _pick(rng, MUTATIONS)
    model, how = mutation(rng, seed.model)
    write_case(folder, seed, model)
    return Case(k, key, f"{seed.name}: {mutation.__name__}: {how}", folder)
