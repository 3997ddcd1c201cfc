"""The doctor's node-level checks: probe each distinct node, explain failures.

Each node of the main graph is reduced to its signature (domain, op type,
imported opset, input types and ranks, small constant inputs, attributes);
one single-node model per signature is loaded with the same libraries, so a
1,000-node network costs a few dozen sessions.  A failing probe is then
questioned further, again through the runtime (explain.py): would a known
library resolve the op, which input types does the kernel take, would a
constant input work as an attribute, is there a kernel at another opset.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import onnx
from onnx import AttributeProto, TensorProto

from . import explain, probe
from .findings import Finding, op_name
from .probe import Library, Outcome

UNKNOWN = object()


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
    """Probes every node of a model's main graph; explain.py questions the
    probes that fail, through load() and finding()."""

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

    def custom(self, node) -> bool:
        return node.domain not in probe.STANDARD_DOMAINS

    def load(self, node, inputs, libraries=None, opsets=None) -> Outcome:
        functions = self.model.functions if (node.domain, node.op_type) in self.functions else ()
        model = probe.node_model(node, inputs, opsets or self.opsets, functions, self.ir)
        if libraries is None:
            libraries = self.libraries if self.custom(node) else []
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
        found = Probe(node, inputs, outcome, self.libraries if self.custom(node) else [])
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
                finding = explain.explain(self, found)
                if finding:
                    key = (finding.kind, finding.op, finding.summary, finding.fix)
                    if key in findings:
                        findings[key].nodes += finding.nodes
                    else:
                        findings[key] = finding
            elif self.custom(node) and (node.domain, node.op_type) not in self.functions \
                    and (node.domain, node.op_type) not in resolved:
                resolved.add((node.domain, node.op_type))
                finding = self.finding(found, "info", "resolved",
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

    def finding(self, found, severity, kind, summary, fix="", ort=None, details=()) -> Finding:
        """A finding about ``found``'s op and nodes, quoting ORT's message unless given ``ort``."""
        node = found.node
        return Finding(severity, kind, summary, fix, op_name(node), self.version(node.domain),
                       list(found.labels), found.outcome.message if ort is None else ort,
                       list(details))
