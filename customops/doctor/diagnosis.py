"""A diagnosis: the model read, every check run, the findings in order."""

from __future__ import annotations

import functools
import json
import os
from dataclasses import asdict, dataclass

import onnx

from . import probe
from .findings import Finding, domain_name
from .model_checks import (check_libraries, function_findings, model_checks,
                           output_type_findings)
from .nodes import NodeChecks
from .text import checked_text


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
        libraries = ", ".join(probe.printable(os.path.basename(p))
                              for p in self.libraries) or "none"
        head = (f"{self.model}: onnxruntime {self.onnxruntime} "
                f"(reads IR <= {self.max_ir_version}), libraries: {libraries}")
        body = [line for f in self.findings for line in f.lines()]
        tail = (f"{counts['error']} error(s), {counts['warning']} warning(s)"
                + ("" if counts["error"] else ": the model loads"))
        return "\n".join([head, *body, tail])

    __repr__ = __str__

    def to_json(self) -> str:
        return json.dumps(asdict(self) | {"exit_status": self.exit_status}, indent=2)


def read_model(model) -> tuple[onnx.ModelProto, str]:
    """The ModelProto and a name for it; ModelReadError with one line if unreadable."""
    if isinstance(model, onnx.ModelProto):
        return model, model.graph.name or "model"
    name = "model" if isinstance(model, bytes) else probe.printable(model)
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


def diagnose(model, libraries=()) -> Diagnosis:
    """Every problem the installed onnxruntime has with ``model`` (a path,
    serialized bytes or an onnx.ModelProto) when ``libraries`` (custom-op
    library paths) are registered, each with its fix.  Raises ModelReadError
    if the model cannot be read."""
    proto, name = read_model(model)
    proto, text_findings = checked_text(proto)  # every check below reads only text
    rt = probe.Runtime()
    libraries, findings = check_libraries(libraries, rt)
    # The whole graph, as the deployment will load it: from the file (ORT reads any
    # external data itself).  ORT's Python binding takes only paths that are valid
    # UTF-8 (onnxruntime 1.31.1 raises a TypeError for others); such a model is
    # loaded from the bytes read above, its external data included.  So is a model
    # with strings that are not UTF-8, as escaped above: ORT quotes them in its
    # messages, which its binding cannot decode (onnxruntime 1.32.0 then prints
    # "EP Error" lines to stdout).  The range checks ask it whether it loads.
    source = model if isinstance(model, (str, os.PathLike)) and probe.takes_path(model) \
        and not text_findings else proto
    as_is = functools.cache(lambda: rt.load(source, libraries, optimize=True))
    findings += text_findings + model_checks(proto, rt, as_is)
    nodes = NodeChecks(proto, rt, libraries)
    refused = {f.op for f in findings if f.kind == "opset" and f.severity == "error"}
    if not refused & {domain_name(d) for d in probe.STANDARD_DOMAINS}:
        findings += nodes.run()  # (every node probe would fail too)
    if proto.ir_version > rt.max_ir_version:  # the rest, at an IR version this runtime reads
        whole = onnx.ModelProto()
        whole.CopyFrom(proto)
        whole.ir_version = rt.max_ir_version
        whole = rt.load(whole, libraries, optimize=True)
    else:
        whole = as_is()
    findings += function_findings(proto, nodes.probes, whole)
    findings += output_type_findings(proto, nodes.inferred)
    if not whole.ok and not any(f.severity == "error" for f in findings):
        findings.append(Finding("error", "load", "the whole model does not load, although "
                                "each node does on its own", ort=whole.message,
                                fix="read ORT's message: it names the node"))
    order = {"error": 0, "warning": 1, "info": 2}
    findings.sort(key=lambda f: order[f.severity])
    return Diagnosis(name, rt.version, rt.max_ir_version, libraries, findings)
