"""Why a model will not load or run in ONNX Runtime, and how to fix it.

    python -m customops.doctor model.onnx [--library PATH]... [--json]

    from customops.doctor import diagnose
    print(diagnose("model.onnx", libraries=[customops.ort.library_path()]))

Every verdict comes from the installed onnxruntime itself: the doctor loads
the model, then one single-node model per distinct node signature (domain,
op, opset, input types, attributes) with the same libraries registered
(probe.py), and reads ORT's own messages.  onnx.defs only supplies what the
ONNX standard says, such as the opset an op first appeared in.  Exit status:
0 no error (warnings allowed), 1 errors, 2 the model cannot be read, 3 the
doctor itself failed (one line on stderr, never a traceback).  Needs onnx and
onnxruntime only, never torch.

The package, by concern:
    cli.py           the command line
    diagnosis.py     reads the model, runs every check, orders the findings
    text.py          strings that are not UTF-8: findings, and a copy the checks can read
    model_checks.py  IR version, opsets, libraries, model-local functions, output types
    nodes.py         probes each distinct node in its own session (NodeChecks)
    explain.py       ORT's message about a node -> the explanation (a table)
    explain_types.py     input types, input count, a constant input that is an attribute
    explain_versions.py  an op missing at the imported opset, no kernel for these types
    probe.py         the questions put to onnxruntime, one small session each
    findings.py      Finding and the names the findings use
"""

from __future__ import annotations

from . import probe
from .cli import main
from .diagnosis import Diagnosis, ModelReadError, diagnose, read_model
from .findings import Finding

__all__ = ["Diagnosis", "Finding", "ModelReadError", "diagnose", "main", "probe", "read_model"]
