"""The doctor's node-level checks: probe each distinct node, explain failures.

Each node of the main graph is reduced to its signature (domain, op type,
imported opset, input types and ranks, small constant inputs, attributes);
one single-node model per signature is loaded with the same libraries, so a
1,000-node network costs a few dozen sessions.  A failing probe is then
questioned further, again through the runtime: would a known library
resolve the op, which input types does the kernel take, would a constant
input work as an attribute, is there a kernel at another opset.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, helper, numpy_helper

from customops import probe
from customops.probe import Library, Outcome

# Standard ops whose ORT kernel came late, and what to use meanwhile (measured).
FIRST_RELEASE = {
    ("", "DeformConv"): ("1.25.0", "customops' custom::deform_conv2d "
                                   "(customops.deform_conv2d in torch)"),
}
SMALL = 16  # constants up to this many elements go into probes as values, not just types
UNKNOWN = object()


@dataclass
class Finding:
    severity: str  # "error", "warning" or "info"
    kind: str      # what kind of problem: ir-version, opset, unresolved-op, input-type, ...
    summary: str   # the problem in one line
    fix: str = ""
    op: str = ""   # domain::op_type
    domain_version: int | None = None  # the version of op's domain the model imports
    nodes: list = field(default_factory=list)
    ort: str = ""  # what ORT says, first line
    details: list = field(default_factory=list)  # further lines: expected vs given, C++ / CLI

    def lines(self) -> list[str]:
        where = ""
        if "::" in self.op:
            domain = self.op.rsplit("::", 1)[0]
            where = f"{self.op} ({domain} {self.domain_version}"
            if self.nodes:
                shown = ", ".join(self.nodes[:3])
                more = f" and {len(self.nodes) - 3} more" if len(self.nodes) > 3 else ""
                where += f", node{'s' if len(self.nodes) > 1 else ''} {shown}{more}"
            where += "): "
        lines = [f"{self.severity:<7} {where}{self.summary}"]
        lines += [f"        ORT: {self.ort}"] * bool(self.ort)
        lines += [f"        fix: {self.fix}"] * bool(self.fix)
        lines += [f"             {line}" for line in self.details]
        return lines


def domain_name(domain: str) -> str:
    return domain or "ai.onnx"


def op_name(node) -> str:
    return f"{domain_name(node.domain)}::{node.op_type}"


@functools.cache
def _since_versions(op_type: str, domain: str) -> list[int]:
    """The opsets in which the ONNX standard (this onnx package) defines or changes ``op_type``."""
    return sorted(s.since_version for s in onnx.defs.get_all_schemas_with_history()
                  if s.name == op_type and s.domain == domain)


def _type_text(value) -> str:
    if isinstance(value, TensorProto):
        return probe.type_name(value.data_type)
    if value.HasField("tensor_type"):
        return probe.type_name(value.tensor_type.elem_type)
    return "non-tensor"


def _elem(value) -> int:
    if isinstance(value, TensorProto):
        return value.data_type
    return value.tensor_type.elem_type if value.HasField("tensor_type") else 0


def _with_elem(value, elem: int) -> onnx.TypeProto:
    dims = list(value.dims) if isinstance(value, TensorProto) else (
        [None] * len(value.tensor_type.shape.dim) if value.tensor_type.HasField("shape") else None)
    return helper.make_tensor_type_proto(elem, dims)


def _declared_types(model: onnx.ModelProto) -> dict:
    """Value name -> TypeProto, from the model and onnx's shape inference
    (which knows the standard ops, not the custom ones)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001  an inference error is ORT's to report, per node
        inferred = model
    graph = inferred.graph
    types = {vi.name: vi.type for vi in [*graph.input, *graph.value_info, *graph.output]
             if _elem(vi.type) or vi.type.HasField("sequence_type")}
    for tensor in model.graph.initializer:
        types[tensor.name] = helper.make_tensor_type_proto(tensor.data_type, list(tensor.dims))
    return types


def _small_constants(model: onnx.ModelProto) -> dict:
    """Value name -> TensorProto for initializers and Constant outputs of at most SMALL elements."""
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
                np.prod(tensor.dims, dtype=int) <= SMALL:
            copy = TensorProto()
            copy.CopyFrom(tensor)
            copy.name = ""
            small[name] = copy
    return small


@dataclass
class Probe:
    """One node signature, its representative node, and what ORT said."""

    node: onnx.NodeProto
    inputs: list
    outcome: Outcome
    libraries: list
    labels: list = field(default_factory=list)  # every node with this signature
    provider: Library | None = None  # a known library that resolves the op when ours do not
    provided: Outcome | None = None


class NodeChecks:
    def __init__(self, model: onnx.ModelProto, rt: probe.Runtime, libraries: list):
        self.model, self.rt, self.libraries = model, rt, libraries
        self.opsets = {o.domain: o.version for o in model.opset_import}
        self.functions = {(f.domain, f.name): f for f in model.functions}
        self.ir = min(model.ir_version, rt.max_ir_version)
        self.types = _declared_types(model)
        self.constants = _small_constants(model)
        given = {os.path.realpath(p) for p in libraries}
        self.known = [lib for lib in probe.known_libraries()
                      if os.path.realpath(lib.path) not in given]
        self.probes: dict = {}
        self.inferred: dict = {}  # output name -> the TypeProto ORT infers for it
        self.unchecked: list = []  # (label, why)

    # -- probing ---------------------------------------------------------
    def version(self, domain: str) -> int | None:
        return self.opsets.get(domain, self.opsets.get("ai.onnx" if domain == "" else domain))

    def _custom(self, node) -> bool:
        return node.domain not in probe.STANDARD_DOMAINS

    def load(self, node, inputs, libraries=None, opsets=None) -> Outcome:
        functions = self.model.functions if (node.domain, node.op_type) in self.functions else ()
        model = probe.node_model(node, inputs, opsets or self.opsets, functions, self.ir)
        if libraries is None:
            libraries = self.libraries if self._custom(node) else []
        return self.rt.load(model, libraries)

    def _input(self, name):
        if not name:
            return None
        return self.constants.get(name) or self.types.get(name, UNKNOWN)

    def _signature(self, node, inputs) -> tuple:
        def key(value):
            if value is None or isinstance(value, TensorProto):
                return value and value.SerializeToString()
            return probe._generalized(value, "").SerializeToString()

        attributes = tuple(sorted(
            (a.name, a.t.data_type, tuple(a.t.dims)) if a.type == AttributeProto.TENSOR
            else (a.name, a.SerializeToString()) for a in node.attribute))
        return (node.domain, node.op_type, self.version(node.domain),
                tuple(map(key, inputs)), attributes)

    def _probe(self, node, inputs) -> Probe:
        outcome = self.load(node, inputs)
        found = Probe(node, inputs, outcome, self.libraries if self._custom(node) else [])
        if not outcome.ok and "is not a registered function/op" in outcome.message:
            for library in self.known:  # would a library the user did not give resolve it?
                trial = self.load(node, inputs, [*found.libraries, library.path])
                if not trial.ok and "already set in registry" in trial.message:
                    trial = self.load(node, inputs, [library.path])
                if trial.ok:
                    found.provider, found.provided = library, trial
                    break
        return found

    def run(self) -> list[Finding]:
        for index, node in enumerate(self.model.graph.node):
            label = node.name or f"#{index}"
            if any(a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS) for a in node.attribute):
                self.unchecked.append((label, "has subgraphs (checked by the whole-model load)"))
                continue
            inputs = [self._input(name) for name in node.input]
            if any(value is UNKNOWN for value in inputs):
                self.unchecked.append((label, "an input type is unknown"))
                continue
            key = self._signature(node, inputs)
            if key not in self.probes:
                self.probes[key] = self._probe(node, inputs)
            found = self.probes[key]
            found.labels.append(label)
            outcome = found.outcome if found.outcome.ok else found.provided
            for theirs, ours in zip(found.node.output, node.output):
                if outcome and ours and theirs in outcome.outputs:
                    self.inferred[ours] = outcome.outputs[theirs]
                    self.types.setdefault(ours, outcome.outputs[theirs])
        return self._findings()

    # -- explaining ------------------------------------------------------
    def _findings(self) -> list[Finding]:
        findings, resolved = [], set()
        for found in self.probes.values():
            node = found.node
            if not found.outcome.ok:
                finding = self._explain(found)
                if finding:
                    findings.append(finding)
            elif self._custom(node) and (node.domain, node.op_type) not in self.functions \
                    and (node.domain, node.op_type) not in resolved:
                resolved.add((node.domain, node.op_type))
                findings.append(self._base(found, "info", "resolved",
                                           f"resolved by {self._resolver(found)}", ort=""))
        if self.unchecked:
            labels = [label for label, _ in self.unchecked]
            reasons = sorted({why for _, why in self.unchecked})
            findings.append(Finding("info", "unchecked", f"{len(labels)} node(s) not probed one "
                                    f"by one: {'; '.join(reasons)}", nodes=labels))
        return findings

    def _resolver(self, found: Probe) -> str:
        if self.load(found.node, found.inputs, []).ok:
            return "onnxruntime itself (no library needed)"
        for path in found.libraries:
            if len(found.libraries) == 1 or self.load(found.node, found.inputs, [path]).ok:
                return os.path.basename(path)
        return "the registered libraries together"

    def _base(self, found, severity, kind, summary, fix="", ort=None, details=()) -> Finding:
        node = found.node
        return Finding(severity, kind, summary, fix, op_name(node), self.version(node.domain),
                       list(found.labels), found.outcome.message if ort is None else ort,
                       list(details))

    def _explain(self, found: Probe) -> Finding | None:
        node, message = found.node, found.outcome.message
        if "is not a registered function/op" in message:
            return self._unresolved(found)
        function = self.functions.get((node.domain, node.op_type))
        if function and body_problems(function, self.opsets):
            return None  # function_findings explains it
        missing = re.search(r"No Op registered for (\S+) with domain_version of (\d+)", message)
        if missing:
            return self._not_in_opset(found, missing[1], node.domain, int(missing[2]))
        if "Could not find an implementation" in message:
            return self._no_kernel(found)
        if re.search(r"Type Error|bound to different types|input size \d+ not in range", message):
            as_attribute = self._attribute_as_input(found)
            if as_attribute:
                return as_attribute
            if "input size" in message:
                return self._base(found, "error", "input-count",
                                  f"the kernel does not take {len(node.input)} inputs",
                                  "match the inputs the kernel declares (ORT's message gives "
                                  "the range); pass constants it reads as attributes")
            return self._input_types(found)
        if "Exception during initialization" in message:
            return self._base(found, "error", "kernel-refused",
                              "the kernel refused the node when the session created it",
                              "give the node what the kernel's message asks for")
        return self._base(found, "error", "node", "ORT refuses this node",
                          "read ORT's message; run the doctor again after the fix")

    def _unresolved(self, found: Probe) -> Finding:
        if found.provider:
            lib = found.provider
            return self._base(found, "error", "unresolved-op",
                              f"no registered library has this op; {lib.name}'s library does",
                              f"register it: {lib.registration()}", details=[lib.elsewhere()])
        known = ", ".join(lib.name for lib in self.known)
        return self._base(found, "error", "unresolved-op",
                          "no registered library has this op"
                          + (f", nor does any known one ({known})" if known else ""),
                          "register the library that implements it (check it with "
                          "--library PATH) or write its kernel (an ORT custom-op library)")

    def _not_in_opset(self, found, op_type, domain, version) -> Finding:
        later = [v for v in _since_versions(op_type, domain) if v > version]
        if not later:
            return self._base(found, "error", "op-not-in-opset",
                              f"{op_type} is not an op of {domain_name(domain)} at any opset "
                              "onnx knows", "use an op the standard has, or a custom domain")
        return self._base(found, "error", "op-not-in-opset",
                          f"{op_type} does not exist at {domain_name(domain)} opset {version}; "
                          f"it first appears in opset {later[0]} (onnx.defs)",
                          f"import {domain_name(domain)} opset >= {later[0]} "
                          f"(torch.onnx.export(..., opset_version={later[0]}))")

    def _accepted(self, found, indices) -> list[str]:
        """The element types that load when given to all of ``indices`` at once."""
        accepted = []
        for elem in probe.ELEMENT_TYPES:
            trial = [(_with_elem(v, elem) if i in indices else v) for i, v in enumerate(found.inputs)]
            if self.load(found.node, trial).ok:
                accepted.append(probe.type_name(elem))
        return accepted

    def _input_types(self, found: Probe) -> Finding:
        node, message = found.node, found.outcome.message
        named = re.search(r"of input parameter \((.*?)\)", message)
        clash = re.search(r"bound to different types \((\S+) and (\S+) in", message)
        present = [i for i, v in enumerate(found.inputs) if v is not None]
        if named and named[1] in node.input:
            candidates = [list(node.input).index(named[1])]
        elif clash:
            candidates = [i for i in present if _type_text(found.inputs[i]) == clash[2]]
        else:
            candidates = present
        details, fix = [], "cast the inputs to the types the kernel takes"
        for i in candidates:
            accepted = self._accepted(found, {i})
            given = _type_text(found.inputs[i])
            if accepted:
                details.append(f"input {i} '{node.input[i]}': given {given}, "
                               f"the kernel takes {' or '.join(accepted)}")
                if len(details) == 1:
                    fix = (f"cast '{node.input[i]}' to {accepted[0]} before the node (a Cast node; "
                           "in torch .to(dtype)), or feed it as that type")
        summary = "input types match no kernel registered for this op"
        if not details:
            summary += " (no single input's type change makes it load)"
        return self._base(found, "error", "input-type", summary, fix, details=details)

    def _attribute_as_input(self, found: Probe) -> Finding | None:
        """A constant input the kernel wants as an attribute (the seeds' KNNQuery
        passes nsample as a Constant input): drop it, read which attribute the
        kernel then asks for, and check that it loads with that attribute."""
        node = found.node
        for i, value in enumerate(found.inputs):
            if not isinstance(value, TensorProto):
                continue
            trimmed, inputs = onnx.NodeProto(), found.inputs[:i] + found.inputs[i + 1:]
            trimmed.CopyFrom(node)
            del trimmed.input[i]
            outcome = self.load(trimmed, inputs)
            asked = re.search(r"attribute(?: with name:)?\s*'?([A-Za-z_]\w*)", outcome.message)
            if outcome.ok or not asked:
                continue
            array = numpy_helper.to_array(value)
            python = array.item() if array.ndim == 0 else array.tolist()
            trimmed.attribute.append(helper.make_attribute(asked[1], python))
            if not self.load(trimmed, inputs).ok:
                continue
            suffix = {AttributeProto.INT: "i", AttributeProto.FLOAT: "f", AttributeProto.INTS: "is",
                      AttributeProto.FLOATS: "fs"}.get(trimmed.attribute[-1].type, "t")
            return self._base(
                found, "error", "attribute-as-input",
                f"input {i} '{node.input[i]}' is a constant ({_type_text(value)} {python!r}) that "
                f"the kernel reads as attribute '{asked[1]}'",
                f"make it an attribute, {asked[1]}={python!r}, and drop the input "
                f"(torch.onnx.ops.symbolic(..., attrs={{'{asked[1]}': {python!r}}}); "
                f"TorchScript symbolic: g.op(..., {asked[1]}_{suffix}={python!r}))",
                details=[f"checked: without input {i} and with that attribute the node loads"])
        return None

    def _no_kernel(self, found: Probe) -> Finding:
        node = found.node
        version = self.version(node.domain)
        first = next((v for v in found.inputs if v is not None), None)
        same = {i for i, v in enumerate(found.inputs) if v is not None and _elem(v) == _elem(first)}
        types = self._accepted(found, same) if first is not None else []
        opsets = [v for v in _since_versions(node.op_type, node.domain) if v != version
                  and self.load(found.node, found.inputs, opsets=self.opsets | {node.domain: v}).ok]
        given = ", ".join(_type_text(v) for v in found.inputs if v is not None)
        details = [f"given: {given}; probed: kernels at other opsets: "
                   f"{', '.join(map(str, opsets)) or 'none'}; "
                   f"other input types: {', '.join(types) or 'none'}"]
        release, alternative = FIRST_RELEASE.get((node.domain, node.op_type), (None, None))
        fixes = [f"onnxruntime >= {release} has it"] if release else []
        fixes += [f"export at opset {opsets[-1]}"] if opsets else []
        fixes += [f"cast the inputs to {types[0]}"] if types else []
        fixes += [f"use {alternative}" if alternative else "a custom kernel in your own domain"]
        return self._base(found, "error", "no-kernel",
                          f"onnxruntime {self.rt.version} has no kernel for {node.op_type} "
                          f"at opset {version} with these input types", "; or ".join(fixes),
                          details=details)


def body_problems(function: onnx.FunctionProto, model_opsets: dict) -> dict:
    """(op, domain) -> ({"the function": version, "the model": version} where
    the op is missing, later versions that have it), for the standard ops of
    the function's body.  Both imports count: ORT inlines the body at the
    model's opset (measured with onnxruntime 1.31.1)."""
    imports = {o.domain: o.version for o in function.opset_import}
    problems = {}
    for node in function.node:
        if node.domain not in probe.STANDARD_DOMAINS:
            continue
        for who, opsets in (("the function", imports), ("the model", model_opsets)):
            version = opsets.get(node.domain, opsets.get("ai.onnx"))
            if version is not None and not onnx.defs.has(node.op_type, version, node.domain):
                missing, _ = problems.setdefault((node.op_type, node.domain), ({}, None))
                missing[who] = version
                later = [v for v in _since_versions(node.op_type, node.domain) if v > version]
                problems[node.op_type, node.domain] = (missing, tuple(later))
    return problems


def function_findings(model: onnx.ModelProto, probes: dict, whole: Outcome) -> list[Finding]:
    """Model-local functions whose body uses an op beyond the opset imported.
    ORT's message is the whole model's when it names the op (the one a user
    sees), else the calling node's."""
    findings = []
    opsets = {o.domain: o.version for o in model.opset_import}
    for function in model.functions:
        called = [f for f in probes.values()
                  if (f.node.domain, f.node.op_type) == (function.domain, function.name)]
        failed = [f.outcome.message for f in called if not f.outcome.ok]
        for (op_type, domain), (missing, later) in body_problems(function, opsets).items():
            needed = f"opset {later[0]}" if later else "an opset this onnx does not know"
            imported = ", ".join(f"{who} imports {domain_name(domain)} {version}"
                                 for who, version in missing.items())
            said = [m for m in [whole.message, *failed] if op_type in m] or failed
            target = later[0] if later else "N"
            findings.append(Finding(
                "error" if said else "warning", "function-opset",
                f"the body of function {function.name} uses {op_type}, which needs {needed} "
                f"(onnx.defs); {imported}",
                f"import {domain_name(domain)} {target} in the function (onnxscript: "
                f"from onnxscript.onnx_opset import opset{target} as op) and in the model "
                f"(torch.onnx.export(..., opset_version={target}))",
                op=f"{function.domain}::{function.name}", domain_version=opsets.get(function.domain),
                nodes=[label for f in called for label in f.labels], ort=said[0] if said else "",
                details=[] if called else ["no node calls it, so ORT never loads it"]))
    return findings


def output_type_findings(model: onnx.ModelProto, inferred: dict) -> list[Finding]:
    """Custom-op outputs the model gives no element type or shape for."""
    graph = model.graph
    declared = {vi.name: vi.type for vi in [*graph.value_info, *graph.output]}
    opsets = {o.domain: o.version for o in model.opset_import}
    functions = {(f.domain, f.name) for f in model.functions}
    grouped = {}
    for index, node in enumerate(graph.node):
        if node.domain in probe.STANDARD_DOMAINS or (node.domain, node.op_type) in functions:
            continue
        for name in filter(None, node.output):
            tensor = declared[name].tensor_type if name in declared else None
            placeholder = tensor is not None and tensor.HasField("shape") and tensor.shape.dim \
                and all(re.fullmatch(re.escape(node.op_type) + r".*_dim_\d+", d.dim_param)
                        for d in tensor.shape.dim)
            if tensor is None or not tensor.elem_type or not tensor.HasField("shape") or placeholder:
                entry = grouped.setdefault((node.domain, node.op_type), [[], []])
                entry[0].append(node.name or f"#{index}")
                ort_says = inferred.get(name)
                entry[1].append(f"{name}: " + ("no type" if tensor is None or not tensor.elem_type
                                               else "placeholder dims" if placeholder
                                               else "no shape")
                                + (f" (ORT infers {_type_text(ort_says)} of rank "
                                   f"{len(ort_says.tensor_type.shape.dim)})" if ort_says else ""))
    return [Finding("warning", "missing-output-type",
                    "outputs without type or shape in the model: onnx shape inference and tools "
                    "other than ORT see unknowns (the TorchScript exporter's 'shape inference of "
                    f"{domain}::{op} is missing')",
                    "declare them: torch.onnx.ops.symbolic(..., dtype=..., shape=...), or "
                    ".setType(...) on the TorchScript symbolic's outputs",
                    f"{domain}::{op}", opsets.get(domain), sorted(set(labels)), "", outputs[:4])
            for (domain, op), (labels, outputs) in grouped.items()]
