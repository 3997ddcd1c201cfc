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

import onnx
from onnx import AttributeProto, TensorProto, helper, numpy_helper

from customops import probe
from customops.probe import Library, Outcome

# Standard ops whose ORT kernel came late, and what to use meanwhile (measured).
FIRST_RELEASE = {
    ("", "DeformConv"): ("1.25.0", "customops' custom::deform_conv2d "
                                   "(customops.deform_conv2d in torch)"),
}
UNKNOWN = object()
# A kernel asking for an attribute: ours ("attribute nsample (int) is required"),
# ORT's KernelInfo ("No attribute with name:'nsample'is defined.").
ASKED_ATTRIBUTE = re.compile(r"attribute(?: with name:)?\s*'?([A-Za-z_]\w*)")


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
def since_versions(op_type: str, domain: str) -> list[int]:
    """The opsets in which the ONNX standard (this onnx package) defines or changes ``op_type``."""
    return sorted(s.since_version for s in onnx.defs.get_all_schemas_with_history()
                  if s.name == op_type and s.domain == domain)


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
        self.types = probe.declared_types(model)
        self.constants = probe.small_constants(model)
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
        if name in self.constants:
            return self.constants[name]
        return self.types.get(name, UNKNOWN)

    def _signature(self, node, inputs) -> tuple:
        def key(value):
            if value is None:
                return None
            if isinstance(value, TensorProto):  # a small constant: its value counts
                return value.SerializeToString()
            return probe.generalized(value, "").SerializeToString()

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
        """One finding per problem: signatures that fail alike share one."""
        findings, resolved = {}, set()
        for found in self.probes.values():
            node = found.node
            if not found.outcome.ok:
                finding = self._explain(found)
                if finding:
                    key = (finding.kind, finding.op, finding.summary, finding.fix)
                    if key in findings:
                        findings[key].nodes += finding.nodes
                    else:
                        findings[key] = finding
            elif self._custom(node) and (node.domain, node.op_type) not in self.functions \
                    and (node.domain, node.op_type) not in resolved:
                resolved.add((node.domain, node.op_type))
                finding = self._base(found, "info", "resolved",
                                     f"resolved by {self._resolver(found)}", ort="")
                findings[id(finding)] = finding
        findings = list(findings.values())
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
            asked = ASKED_ATTRIBUTE.search(message)
            fix = (f"give the node attribute '{asked[1]}' (onnx.helper.make_node(..., "
                   f"{asked[1]}=...); TorchScript symbolic: g.op(..., {asked[1]}_i=...))"
                   if asked else "give the node what the kernel's message asks for")
            return self._base(found, "error", "kernel-refused",
                              "the kernel refused the node when the session created it", fix)
        return self._base(found, "error", "node", "ORT refuses this node",
                          "read ORT's message; run the doctor again after the fix")

    def _unresolved(self, found: Probe) -> Finding:
        if found.provider:
            lib = found.provider
            return self._base(found, "error", "unresolved-op",
                              f"no registered library has this op; the {lib.name} library does",
                              f"register it: {lib.registration()}", details=[lib.elsewhere()])
        known = ", ".join(lib.name for lib in self.known)
        return self._base(found, "error", "unresolved-op",
                          "no registered library has this op"
                          + (f", nor does any known one ({known})" if known else ""),
                          "register the library that implements it (check it with "
                          "--library PATH) or write its kernel (an ORT custom-op library)")

    def _not_in_opset(self, found, op_type, domain, version) -> Finding:
        later = [v for v in since_versions(op_type, domain) if v > version]
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
            trial = [probe.with_elem(v, elem) if i in indices else v
                     for i, v in enumerate(found.inputs)]
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
            candidates = [i for i in present if probe.type_text(found.inputs[i]) == clash[2]]
        else:
            candidates = present
        details, fix = [], "cast the inputs to the types the kernel takes"
        for i in candidates:
            accepted = self._accepted(found, {i})
            given = probe.type_text(found.inputs[i])
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
            asked = ASKED_ATTRIBUTE.search(outcome.message)
            if outcome.ok or not asked:
                continue
            attribute = _as_attribute(asked[1], value)
            if attribute is None:
                continue
            python = helper.get_attribute_value(attribute)
            trimmed.attribute.append(attribute)
            if not self.load(trimmed, inputs).ok:
                continue
            suffix = {AttributeProto.INT: "i", AttributeProto.FLOAT: "f", AttributeProto.INTS: "is",
                      AttributeProto.FLOATS: "fs"}[attribute.type]
            return self._base(
                found, "error", "attribute-as-input",
                f"input {i} '{node.input[i]}' is a constant ({probe.type_text(value)} "
                f"{python!r}) that the kernel reads as attribute '{asked[1]}'",
                f"make it an attribute, {asked[1]}={python!r}, and drop the input "
                f"(torch.onnx.ops.symbolic(..., attrs={{'{asked[1]}': {python!r}}}); "
                f"TorchScript symbolic: g.op(..., {asked[1]}_{suffix}={python!r}))",
                details=[f"checked: without input {i} and with that attribute the node loads"])
        return None

    def _no_kernel(self, found: Probe) -> Finding:
        node = found.node
        version = self.version(node.domain)
        first = next((v for v in found.inputs if v is not None), None)
        same = {i for i, v in enumerate(found.inputs)
                if v is not None and probe.elem_type(v) == probe.elem_type(first)}
        types = self._accepted(found, same) if first is not None else []
        schemas = since_versions(node.op_type, node.domain)
        in_force = max((v for v in schemas if v <= version), default=None)
        opsets = [v for v in schemas if v != in_force
                  and self.load(found.node, found.inputs, opsets=self.opsets | {node.domain: v}).ok]
        given = ", ".join(probe.type_text(v) for v in found.inputs if v is not None)
        details = [f"given: {given}; probed: loads at other opsets: "
                   f"{', '.join(map(str, opsets)) or 'none'}; "
                   f"loads with input types: {', '.join(types) or 'none'}"]
        release, alternative = FIRST_RELEASE.get((node.domain, node.op_type), (None, None))
        fixes = [f"onnxruntime >= {release} has it"] if release else []
        fixes += [f"export at opset {opsets[-1]}"] if opsets else []
        fixes += [f"cast the inputs to {types[0]}"] if types else []
        fixes += [f"use {alternative}" if alternative else "a custom kernel in your own domain"]
        return self._base(found, "error", "no-kernel",
                          f"onnxruntime {self.rt.version} has no kernel for {node.op_type} "
                          f"at opset {version} with these input types", "; or ".join(fixes),
                          details=details)


def _as_attribute(name: str, tensor: TensorProto) -> AttributeProto | None:
    """The attribute a numeric constant input would be (a scalar: int or
    float; a 1-D tensor: their list), or None when it cannot be one or
    cannot be read (raw data shorter than its shape: ORT reports that itself
    when it loads the model)."""
    try:
        array = numpy_helper.to_array(tensor)
    except Exception:  # noqa: BLE001  numpy's and onnx's errors for malformed tensors
        return None
    if array.ndim > 1 or array.dtype.kind not in "iubf":
        return None
    floating = array.dtype.kind == "f"
    if array.ndim == 0:
        return helper.make_attribute(name, array.item(), attr_type=AttributeProto.FLOAT
                                     if floating else AttributeProto.INT)
    # An empty list has no type to infer: give it the one its tensor has.
    return helper.make_attribute(name, array.tolist(), attr_type=AttributeProto.FLOATS
                                 if floating else AttributeProto.INTS)


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
                later = [v for v in since_versions(node.op_type, node.domain) if v > version]
                problems[node.op_type, node.domain] = (missing, tuple(later))
    return problems
