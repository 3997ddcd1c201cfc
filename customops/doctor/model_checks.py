"""The doctor's model-level checks: the IR version, the opsets, the custom-op
libraries, model-local functions and the types of custom ops' outputs."""

from __future__ import annotations

import os
import re

import onnx
from onnx import helper

from . import probe
from .findings import VERSION_RANGE, Finding, domain_name, since_versions
from .probe import Outcome


def _ir_needed(opsets: dict) -> tuple[int, str]:
    """The lowest IR version onnx's release table (onnx.helper.VERSION_TABLE)
    allows for the model's standard opsets, and the opset that requires it."""
    columns = {"": 2, "ai.onnx": 2, "ai.onnx.ml": 3}  # column of the opset in a table row
    needs = [(3, "no standard opset")]
    for domain, version in opsets.items():
        if domain in columns:
            irs = [row[1] for row in helper.VERSION_TABLE if row[columns[domain]] >= version]
            needs.append((min(irs) if irs else onnx.IR_VERSION + 1,
                          f"{domain_name(domain)} {version}"))
    return max(needs)


def model_checks(model, rt: probe.Runtime, loads) -> list[Finding]:
    """The IR version and the opsets against the ranges the ONNX standard and
    this onnxruntime give.  ``loads()``: the outcome of loading the model as it
    is, with the libraries.  A number outside a range is an error only where
    onnxruntime refuses the model: it loads some (IR version 0, opset 0 of a
    domain no node uses: onnxruntime 1.32.0), and then it is a warning."""
    def ranged(kind, summary, fix="", ort=None, **more):
        if loads().ok:
            return Finding("warning", kind, f"{summary}; onnxruntime {rt.version} loads the "
                           "model all the same, other tools may not", fix, **more)
        return Finding("error", kind, summary, fix, ort=ort or loads().message, **more)

    findings = []
    max_ir = rt.max_ir_version
    opsets = {o.domain: o.version for o in model.opset_import}
    if model.ir_version < VERSION_RANGE.start:
        findings.append(ranged(
            "ir-version", f"IR version {model.ir_version}: IR versions start at 1",
            f"model.ir_version = {max_ir}  (the newest this onnxruntime {rt.version} reads)"))
    if model.ir_version > max_ir:
        needed, opset = _ir_needed(opsets)
        why = f"{opset} needs IR >= {needed}, onnx.helper.VERSION_TABLE"
        fix = (f"model.ir_version = {max_ir}  (the opsets allow it: {why})" if needed <= max_ir else
               f"none by editing ({why}): export at a lower opset or upgrade onnxruntime")
        findings.append(ranged(
            "ir-version",
            f"IR version {model.ir_version}: onnxruntime {rt.version} reads at most {max_ir} "
            "(found by loading empty models)", fix,
            details=["onnx.helper.make_model writes onnx's newest IR version unless given "
                     "ir_version=...; exporters write a lower one"]))
    if not opsets:
        findings.append(ranged(
            "opset", "the model imports no opset (a file cut short can look like this)",
            "add one: model.opset_import.append(onnx.helper.make_opsetid('', N))",
            op="ai.onnx"))
    for domain, version in opsets.items():
        if version not in VERSION_RANGE:  # checked first: onnx's schema lookups raise on it
            findings.append(ranged(
                "opset", f"the model imports {domain_name(domain)} opset {version}, "
                f"which is no opset version (they run from {VERSION_RANGE.start} up; onnx "
                "reads them as a 32-bit int)", op=domain_name(domain),
                fix="export with a real opset (torch.onnx.export(..., opset_version=18))"))
            continue
        problem = rt.opset_problem(domain, version)
        if problem:
            best = rt.max_opset(domain, version)
            findings.append(ranged(
                "opset",
                f"the model imports {domain_name(domain)} opset {version}, which onnxruntime "
                f"{rt.version} does not support", op=domain_name(domain), ort=problem,
                fix=(f"export with opset {best} (the highest this runtime loads, probed), "
                     "or upgrade onnxruntime" if best else "upgrade onnxruntime")))
    return findings


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
                op=f"{function.domain}::{function.name}",
                domain_version=opsets.get(function.domain),
                nodes=[label for f in called for label in f.labels], ort=said[0] if said else "",
                details=[] if called else ["no node calls it, so ORT never loads it"]))
    return findings


def output_type_findings(model: onnx.ModelProto, inferred: dict) -> list[Finding]:
    """Custom-op outputs the model gives no element type or shape for."""
    graph = model.graph
    declared = {vi.name: vi.type.tensor_type for vi in [*graph.value_info, *graph.output]}
    opsets = {o.domain: o.version for o in model.opset_import}
    functions = {(f.domain, f.name) for f in model.functions}
    grouped = {}  # (domain, op_type) -> ({node label: None}, {problem: [output names]})
    for index, node in enumerate(graph.node):
        if node.domain in probe.STANDARD_DOMAINS or (node.domain, node.op_type) in functions:
            continue
        for name in filter(None, node.output):
            tensor = declared.get(name)
            dims = tensor.shape.dim if tensor and tensor.HasField("shape") else None
            # The TorchScript exporter invents dims named <op><output>_dim_<i> when it has no shape.
            invented = dims and all(re.fullmatch(re.escape(node.op_type) + r".*_dim_\d+",
                                                 d.dim_param) for d in dims)
            problem = ("no type" if not tensor or not tensor.elem_type else
                       "no shape" if dims is None else "only invented dims" if invented else None)
            if problem:
                if name in inferred:
                    problem += f" (ORT infers {probe.type_text(inferred[name])})"
                labels, problems = grouped.setdefault((node.domain, node.op_type), ({}, {}))
                labels[node.name or f"#{index}"] = None
                problems.setdefault(problem, []).append(name)
    findings = []
    for (domain, op), (labels, problems) in grouped.items():
        details = [", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
                   + f": {problem}" for problem, names in problems.items()]
        findings.append(Finding(
            "warning", "missing-output-type",
            "outputs without type or shape in the model: onnx shape inference and tools other "
            f"than ORT see unknowns (the TorchScript exporter's 'shape inference of {domain}::{op} "
            "is missing')",
            "declare them: torch.onnx.ops.symbolic(..., dtype=..., shape=...), or .setType(...) "
            "on the TorchScript symbolic's outputs",
            f"{domain}::{op}", opsets.get(domain), list(labels), "", details))
    return findings


def check_libraries(paths, rt: probe.Runtime) -> tuple[list[str], list[Finding]]:
    """The libraries that register (together), and a finding for each that does not."""
    accepted, findings = [], []
    for path in map(os.fspath, paths):
        problem = rt.library_problem(path, accepted)
        if problem is None:
            accepted.append(path)
            continue
        together = " together with the ones before it" if accepted and \
            rt.library_problem(path) is None else ""
        findings.append(Finding(
            "error", "library", f"library {probe.printable(path)} cannot be registered{together}",
            ort=problem,
            fix=("register only one library per custom domain" if together else
                 "onnxruntime's Python binding takes only UTF-8 paths: rename the file or "
                 "link it under a UTF-8 name" if not probe.takes_path(path) else
                 "check the path, and that the library was built for this onnxruntime")))
    return accepted, findings


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
            if version is not None and version in VERSION_RANGE and \
                    not onnx.defs.has(node.op_type, version, node.domain):
                missing, _ = problems.setdefault((node.op_type, node.domain), ({}, None))
                missing[who] = version
                later = [v for v in since_versions(node.op_type, node.domain) if v > version]
                problems[node.op_type, node.domain] = (missing, tuple(later))
    return problems
