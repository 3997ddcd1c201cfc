"""Why a model will not load or run in ONNX Runtime, and how to fix it.

    python -m customops.doctor model.onnx [--library PATH]... [--json]

    from customops.doctor import diagnose
    print(diagnose("model.onnx", libraries=[customops.ort.library_path()]))

Every verdict comes from the installed onnxruntime itself: the doctor loads
the model, then one single-node model per distinct node signature (domain,
op, opset, input types, attributes) with the same libraries registered
(customops.probe), and reads ORT's own messages.  onnx.defs only supplies
what the ONNX standard says, such as the opset an op first appeared in.
Exit status: 0 no error (warnings allowed), 1 errors, 2 the model cannot be
read, 3 the doctor itself failed (one line on stderr, never a traceback).  Needs onnx and onnxruntime only, never torch.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from dataclasses import asdict, dataclass

import onnx
from onnx import helper

from customops import probe
from customops.checks import Finding, NodeChecks, body_problems, domain_name
from customops.probe import Outcome


class ModelReadError(ValueError):
    """The model file (or bytes) cannot be read as an ONNX model."""


@dataclass
class Diagnosis:
    """The findings on one model; prints the same text as the command line."""

    model: str
    onnxruntime: str
    max_ir_version: int
    libraries: list
    findings: list

    @property
    def errors(self) -> list:
        return [f for f in self.findings if f.severity == "error"]

    @property
    def exit_status(self) -> int:
        return 1 if self.errors else 0

    def __str__(self) -> str:
        counts = {s: sum(f.severity == s for f in self.findings) for s in ("error", "warning")}
        libraries = ", ".join(shown(os.path.basename(p)) for p in self.libraries) or "none"
        head = (f"{self.model}: onnxruntime {self.onnxruntime} "
                f"(reads IR <= {self.max_ir_version}), libraries: {libraries}")
        body = [line for f in self.findings for line in f.lines()]
        tail = (f"{counts['error']} error(s), {counts['warning']} warning(s)"
                + ("" if counts["error"] else ": the model loads"))
        return "\n".join([head, *body, tail])

    __repr__ = __str__

    def to_json(self) -> str:
        return json.dumps(asdict(self) | {"exit_status": self.exit_status}, indent=2)


def _utf8(path) -> bool:
    try:
        os.fsencode(path).decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def shown(path) -> str:
    """A path as text that prints anywhere: bytes that are not UTF-8 appear
    as \\xNN escapes (the surrogates Python decodes them to cannot be printed)."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def read_model(model) -> tuple[onnx.ModelProto, str]:
    """The ModelProto and a name for it; ModelReadError with one line if unreadable."""
    if isinstance(model, onnx.ModelProto):
        return model, model.graph.name or "model"
    name = "model" if isinstance(model, bytes) else shown(model)
    try:
        if isinstance(model, bytes):
            proto = onnx.load_from_string(model)
        else:
            proto = onnx.load(os.fspath(model))  # also reads external data, checking it is there
    except FileNotFoundError:
        raise ModelReadError(f"{name}: no such file") from None
    except IsADirectoryError:
        raise ModelReadError(f"{name}: is a directory, not an ONNX file") from None
    except onnx.checker.ValidationError as error:  # external data missing or outside the folder
        raise ModelReadError(f"{name}: external data: {str(error).splitlines()[0]}") from None
    except Exception as error:  # noqa: BLE001  protobuf's DecodeError and friends
        raise ModelReadError(f"{name}: not a readable ONNX model (truncated or corrupt?): "
                             f"{str(error).splitlines()[0] if str(error) else type(error).__name__}"
                             ) from None
    if not proto.opset_import and not proto.graph.node and not proto.ir_version:
        raise ModelReadError(f"{name}: not an ONNX model (no IR version, opsets or nodes)")
    return proto, name


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


def _model_checks(model, rt: probe.Runtime) -> list[Finding]:
    findings = []
    max_ir = rt.max_ir_version
    opsets = {o.domain: o.version for o in model.opset_import}
    if model.ir_version > max_ir:
        needed, opset = _ir_needed(opsets)
        why = f"{opset} needs IR >= {needed}, onnx.helper.VERSION_TABLE"
        fix = (f"model.ir_version = {max_ir}  (the opsets allow it: {why})" if needed <= max_ir else
               f"none by editing ({why}): export at a lower opset or upgrade onnxruntime")
        findings.append(Finding(
            "error", "ir-version",
            f"IR version {model.ir_version}: onnxruntime {rt.version} reads at most {max_ir} "
            "(found by loading empty models)", fix,
            ort=rt.load(model).message,
            details=["onnx.helper.make_model writes onnx's newest IR version unless given "
                     "ir_version=...; exporters write a lower one"]))
    if not opsets:
        findings.append(Finding(
            "error", "opset", "the model imports no opset (a file cut short can look like this)",
            "add one: model.opset_import.append(onnx.helper.make_opsetid('', N))",
            op="ai.onnx", ort=rt.load(model).message))
    for domain, version in opsets.items():
        problem = rt.opset_problem(domain, version)
        if problem:
            best = rt.max_opset(domain, version)
            findings.append(Finding(
                "error", "opset",
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


def _check_libraries(paths, rt: probe.Runtime) -> tuple[list[str], list[Finding]]:
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
            "error", "library", f"library {shown(path)} cannot be registered{together}",
            ort=problem,
            fix=("register only one library per custom domain" if together else
                 "onnxruntime's Python binding takes only UTF-8 paths: rename the file or "
                 "link it under a UTF-8 name" if not _utf8(path) else
                 "check the path, and that the library was built for this onnxruntime")))
    return accepted, findings


def diagnose(model, libraries=()) -> Diagnosis:
    """Every problem the installed onnxruntime has with ``model`` (a path,
    serialized bytes or an onnx.ModelProto) when ``libraries`` (custom-op
    library paths) are registered, each with its fix.  Raises ModelReadError
    if the model cannot be read."""
    proto, name = read_model(model)
    rt = probe.Runtime()
    libraries, findings = _check_libraries(libraries, rt)
    findings += _model_checks(proto, rt)
    nodes = NodeChecks(proto, rt, libraries)
    refused = {f.op for f in findings if f.kind == "opset"}  # every node probe would fail too
    if not refused & {domain_name(d) for d in probe.STANDARD_DOMAINS}:
        findings += nodes.run()
    # The whole graph, as the deployment will load it: from the file (ORT reads any
    # external data itself), or a copy at an IR version this runtime reads.  ORT's
    # Python binding takes only paths that are valid UTF-8 (onnxruntime 1.31.1
    # raises a TypeError for others); such a model is loaded from the bytes read
    # above, its external data included.
    whole = model if isinstance(model, (str, os.PathLike)) and _utf8(model) else proto
    if proto.ir_version > rt.max_ir_version:
        whole = onnx.ModelProto()
        whole.CopyFrom(proto)
        whole.ir_version = rt.max_ir_version
    whole = rt.load(whole, libraries, optimize=True)
    findings += function_findings(proto, nodes.probes, whole)
    findings += output_type_findings(proto, nodes.inferred)
    if not whole.ok and not any(f.severity == "error" for f in findings):
        findings.append(Finding("error", "load", "the whole model does not load, although "
                                "each node does on its own", ort=whole.message,
                                fix="read ORT's message: it names the node"))
    order = {"error": 0, "warning": 1, "info": 2}
    findings.sort(key=lambda f: order[f.severity])
    return Diagnosis(name, rt.version, rt.max_ir_version, libraries, findings)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m customops.doctor",
        description="Explain why an ONNX model will not load or run in the installed "
                    "onnxruntime, and how to fix it.")
    parser.add_argument("model", help="the .onnx file")
    parser.add_argument("--library", action="append", default=[], metavar="PATH",
                        help="a custom-op library to register, as the deployment would "
                             "(repeatable)")
    parser.add_argument("--json", action="store_true", help="print the findings as JSON")
    args = parser.parse_args(argv)
    try:
        diagnosis = diagnose(args.model, args.library)
    except ModelReadError as error:
        print(f"customops.doctor: {error}", file=sys.stderr)
        return 2
    except Exception as error:  # noqa: BLE001  a bug here: still one line, never a traceback
        print(f"customops.doctor: internal error on {shown(args.model)} "
              f"({type(error).__name__}: {error}); please report it with the model",
              file=sys.stderr)
        return 3
    print(diagnosis.to_json() if args.json else diagnosis)
    return diagnosis.exit_status


if __name__ == "__main__":
    sys.exit(main())
