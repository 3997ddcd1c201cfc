"""What is checked: the model, the libraries, the samples and the reference,
read and validated once; and the model variants the checks write.

Every variant keeps the model's custom nodes and changes only what the check
is about: an input given the empty name, an input declared with another type
or rank.  A sample that lacks an optional input gets the model with that
input of the node given the empty name (ONNX's "omitted").
"""

from __future__ import annotations

import importlib.util
import inspect
import itertools
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..doctor.probe import STANDARD_DOMAINS, first_line, printable
from ..doctor.text import checked_text


class CannotRun(Exception):
    """The check cannot start (exit status 2): what is wrong, in one line."""


@dataclass
class Sample:
    name: str          # the file it came from, or what the caller called it
    arrays: dict       # model input name -> array (absent: an omitted optional input)


@dataclass
class Target:
    model: onnx.ModelProto
    libraries: list
    samples: list
    reference: Callable | None
    rtol: float
    atol: float
    workdir: Path
    budget: int = 64 << 20  # bytes: the inputs of one grown copy of a sample at most
    written: dict = field(default_factory=dict)
    counter: itertools.count = field(default_factory=itertools.count)
    expected_outputs: list = field(default_factory=list)  # the reference's, per sample
    reference_given: str | None = None  # FILE.py:FUNCTION, as given

    @property
    def input_names(self):
        return [i.name for i in self.model.graph.input]

    @property
    def output_names(self):
        return [o.name for o in self.model.graph.output]

    def custom_nodes(self):
        return custom_nodes(self.model)

    def attributes(self, model=None) -> dict:
        """The custom nodes' attributes as Python values, by name (the first
        node's where two share a name): what the reference is given."""
        found = {}
        for node in reversed(custom_nodes(model or self.model)):
            found.update({a.name: attribute_value(a) for a in node.attribute
                          if a.type != onnx.AttributeProto.GRAPH})
        return found

    def expected(self, arrays: dict, attributes: dict):
        """The reference's outputs (a list) for ``arrays`` and the node's
        ``attributes``, of which it gets those it declares (all with **kwargs)."""
        taken = accepted(self.reference, attributes)
        result = self.reference(**{**{k: v for k, v in attributes.items() if k in taken},
                                   **arrays})
        return list(result) if isinstance(result, (tuple, list)) else [result]

    def write_model(self, model: onnx.ModelProto) -> str:
        """The model in a file of the work directory (one file per distinct model)."""
        data = model.SerializeToString()
        if data not in self.written:
            path = self.workdir / f"model{len(self.written)}.onnx"
            path.write_bytes(data)
            self.written[data] = str(path)
        return self.written[data]

    def new_path(self, suffix: str) -> Path:
        """A file name of the work directory not given out before."""
        return self.workdir / f"f{next(self.counter)}{suffix}"

    def write_feeds(self, arrays: dict) -> str:
        path = self.new_path(".npz")
        np.savez(path, **arrays)
        return str(path)

    def sample_model(self, sample: Sample) -> onnx.ModelProto:
        """The model for a sample: inputs the sample lacks are omitted in the node."""
        return omit_inputs(self.model, [n for n in self.input_names if n not in sample.arrays])

    def rows_of(self, sample: Sample) -> list:
        """The places of the sample's first named dimension (the rows), or []."""
        return next(iter(named_dims(self.sample_model(sample)).values()), [])


def named_dims(model) -> dict:
    """Dimension name -> [(input, axis)] over the model's inputs: sizes that
    must change together for a consistent call."""
    found = {}
    for graph_input in model.graph.input:
        for axis, dim in enumerate(graph_input.type.tensor_type.shape.dim):
            if dim.dim_param:
                found.setdefault(dim.dim_param, []).append((graph_input.name, axis))
    return found


def row_count(arrays: dict, places: list) -> int:
    """The rows of the arrays along their places (0 when there are none)."""
    return min((arrays[n].shape[a] for n, a in places if n in arrays), default=0)


def grown(arrays: dict, places: list, factor: int, seed: int) -> dict:
    """The arrays with factor times the rows: every row once and the others
    drawn at random, in the rows' order (sorted ids stay sorted, groups grow)."""
    rows = row_count(arrays, places)
    rng = np.random.default_rng(seed)
    picked = np.sort(np.concatenate([np.arange(rows),
                                     rng.integers(0, rows, rows * (factor - 1))]))
    changed = dict(arrays)
    for name, axis in places:
        if name in changed:
            changed[name] = np.take(changed[name], picked, axis=axis)
    return changed


def custom_nodes(model: onnx.ModelProto) -> list:
    return [n for n in model.graph.node if n.domain not in STANDARD_DOMAINS]


def attribute_value(attribute):
    """An attribute as the reference sees it: a number, a str, a list, an array."""
    value = helper.get_attribute_value(attribute)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, list):
        return [v.decode("utf-8", "replace") if isinstance(v, bytes) else v for v in value]
    return value


def accepted(function, attributes) -> set:
    """The attribute names ``function`` declares (every one if it takes **kwargs)."""
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):  # no signature to read: give it none
        return set()
    if any(p.kind == p.VAR_KEYWORD for p in parameters):
        return set(attributes)
    return {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
            } & set(attributes)


def copy(model: onnx.ModelProto) -> onnx.ModelProto:
    duplicate = onnx.ModelProto()
    duplicate.CopyFrom(model)
    return duplicate


def omit_inputs(model: onnx.ModelProto, names) -> onnx.ModelProto:
    """The model with the graph inputs ``names`` removed and given the empty
    name wherever a node reads them (trailing empty names are dropped)."""
    if not names:
        return model
    model = copy(model)
    for node in model.graph.node:
        kept = ["" if n in names else n for n in node.input]
        while kept and kept[-1] == "":
            kept.pop()
        del node.input[:]
        node.input.extend(kept)
    for graph_input in [i for i in model.graph.input if i.name in names]:
        model.graph.input.remove(graph_input)
    return model


def loosened(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with nothing declared about its outputs and intermediate
    values, and every input dimension a symbol, so that a hostile input is refused or run by the kernel, not by
    ORT's comparison with a declaration."""
    model = bare(model)
    for graph_input in model.graph.input:
        tensor = graph_input.type.tensor_type
        if tensor.HasField("shape"):
            for i, dim in enumerate(tensor.shape.dim):
                dim.Clear()
                dim.dim_param = f"{graph_input.name}_{i}"
    return model


def bare(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with nothing declared about its outputs (no type, no shape)
    nor its intermediate values: what the session then declares comes from
    the shape functions alone."""
    model = copy(model)
    del model.graph.value_info[:]
    outputs = [helper.make_empty_tensor_value_info(o.name) for o in model.graph.output]
    del model.graph.output[:]
    model.graph.output.extend(outputs)
    return model


def input_dim_names(model: onnx.ModelProto) -> set:
    """The named dimensions of the model's inputs: the names a shape function can pass on."""
    return {d.dim_param for i in model.graph.input for d in i.type.tensor_type.shape.dim
            if d.dim_param}


def with_input_type(model: onnx.ModelProto, name: str, array: np.ndarray) -> onnx.ModelProto:
    """The (loosened) model with input ``name`` declared as ``array``'s dtype and
    rank, each dimension a symbol."""
    model = loosened(model)
    graph_input = next(i for i in model.graph.input if i.name == name)
    graph_input.CopyFrom(helper.make_tensor_value_info(
        name, helper.np_dtype_to_tensor_dtype(array.dtype),
        [f"{name}_{i}" for i in range(array.ndim)]))
    return model


def read(model_path, libraries, samples, reference, rtol, atol, workdir,
         budget=64 << 20) -> Target:
    """Validates everything given; raises CannotRun naming what is wrong."""
    try:
        model = model_path if isinstance(model_path, onnx.ModelProto) else onnx.load(model_path)
    except Exception as error:  # noqa: BLE001  any reason: the model cannot be read
        raise CannotRun(f"cannot read the model {printable(model_path)}: "
                        f"{type(error).__name__}: {error}") from None
    _, not_text = checked_text(model)
    if not_text:  # names compared as text below: the doctor says which and where
        raise CannotRun(f"the model's {not_text[0].summary} (python -m customops.doctor "
                        "names every such field)")
    if not libraries:
        raise CannotRun("give the custom-op library to check (--library PATH)")
    for library in libraries:
        if not Path(library).is_file():
            raise CannotRun(f"--library {printable(library)}: no such file")
    if not samples:
        raise CannotRun("give at least one sample of inputs (--inputs SAMPLE.npz)")
    target = Target(model, [os.path.abspath(p) for p in libraries],
                    [_sample(s, i) for i, s in enumerate(samples)],
                    _reference(reference), rtol, atol, Path(workdir), budget)
    if not target.custom_nodes():
        raise CannotRun("the model has no node of a custom domain: nothing to check")
    names = set(target.input_names)
    for sample in target.samples:
        unknown = sorted(set(sample.arrays) - names)
        if unknown:
            raise CannotRun(f"sample {sample.name}: {', '.join(unknown)} is not an input of the "
                            f"model (its inputs: {', '.join(target.input_names)})")
        size = sum(a.nbytes for a in sample.arrays.values())
        if size > budget:
            raise CannotRun(f"--budget: sample {sample.name}'s inputs take {size} bytes, more "
                            f"than the budget of {budget} bytes for a grown copy: give a larger "
                            "one (MiB)")
    target.reference_given = reference if isinstance(reference, str) else None
    if target.reference is not None:
        target.expected_outputs = [_expected(target, sample) for sample in target.samples]
    return target


def _expected(target, sample) -> list:
    """The reference on one of the user's own samples: if it raises there,
    nothing can be compared (exit 2)."""
    try:
        return target.expected(sample.arrays, target.attributes(target.sample_model(sample)))
    except Exception as error:  # noqa: BLE001  any error of the user's function
        raise CannotRun(f"--reference raises on sample {sample.name} "
                        f"({type(error).__name__}: {first_line(str(error))})") from None


def _sample(given, index) -> Sample:
    """A sample from an .npz path or a dict of arrays."""
    if isinstance(given, dict):
        return Sample(f"sample {index}", {k: np.asarray(v) for k, v in given.items()
                                          if v is not None})
    try:
        with np.load(given, allow_pickle=False) as data:
            return Sample(Path(given).name, {k: data[k] for k in data.files})
    except Exception as error:  # noqa: BLE001
        raise CannotRun(f"--inputs {printable(given)}: cannot read it as .npz "
                        f"({type(error).__name__}: {error})") from None


def _reference(given) -> Callable | None:
    """A callable, or FILE.py:FUNCTION loaded from that file."""
    if given is None or callable(given):
        return given
    path, _, name = str(given).rpartition(":")
    if not path or not Path(path).is_file():
        raise CannotRun(f"--reference {given}: expected FILE.py:FUNCTION with an existing file")
    spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as error:  # noqa: BLE001
        raise CannotRun(f"--reference {given}: importing {path} failed "
                        f"({type(error).__name__}: {error})") from None
    function = getattr(module, name, None)
    if not callable(function):
        raise CannotRun(f"--reference {given}: {path} has no function {name}")
    return function
