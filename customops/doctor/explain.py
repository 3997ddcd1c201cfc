"""ORT's message about a node that does not load -> what is wrong, and the fix.

EXPLANATIONS maps a pattern of the runtime's message to the function that
explains it: the first row whose pattern matches decides, and a message no
row matches gets the generic finding (ORT's words, and "read them").  Each
explainer may question the runtime further through ``checks`` (NodeChecks).
Adding an explanation means adding a row.
"""

from __future__ import annotations

import re

from . import explain_types, explain_versions
from .explain_types import ASKED_ATTRIBUTE
from .findings import Finding
from .model_checks import body_problems


def unresolved(checks, found, match) -> Finding:
    if found.provider:
        lib = found.provider
        return checks.finding(found, "error", "unresolved-op",
                              f"no registered library has this op; the {lib.name} library does",
                              f"register it: {lib.registration()}", details=[lib.elsewhere()])
    known = ", ".join(lib.name for lib in checks.known)
    return checks.finding(found, "error", "unresolved-op",
                          "no registered library has this op"
                          + (f", nor does any known one ({known})" if known else ""),
                          "register the library that implements it (check it with "
                          "--library PATH) or write its kernel (an ORT custom-op library)")


def kernel_refused(checks, found, match) -> Finding:
    asked = ASKED_ATTRIBUTE.search(found.outcome.message)
    fix = (f"give the node attribute '{asked[1]}' (onnx.helper.make_node(..., "
           f"{asked[1]}=...); TorchScript symbolic: g.op(..., {asked[1]}_i=...))"
           if asked else "give the node what the kernel's message asks for")
    return checks.finding(found, "error", "kernel-refused",
                          "the kernel refused the node when the session created it", fix)


def node_refused(checks, found, match) -> Finding:
    return checks.finding(found, "error", "node", "ORT refuses this node",
                          "read ORT's message; run the doctor again after the fix")


EXPLANATIONS = [  # (ORT's message, searched; the explanation)
    (re.compile(r"is not a registered function/op"), unresolved),
    (re.compile(r"No Op registered for (\S+) with domain_version of (\d+)"),
     explain_versions.not_in_opset),
    (re.compile(r"Could not find an implementation"), explain_versions.no_kernel),
    (re.compile(r"Type Error|bound to different types|input size \d+ not in range"),
     explain_types.input_problem),
    (re.compile(r"Exception during initialization"), kernel_refused),
]


def explain(checks, found) -> Finding | None:
    """The finding for a probe that failed; None when another check explains
    it (a model-local function whose body uses an op beyond its opset:
    model_checks.function_findings)."""
    message = found.outcome.message
    match, explainer = next(((m, fn) for pattern, fn in EXPLANATIONS
                             if (m := pattern.search(message))), (None, node_refused))
    function = checks.functions.get((found.node.domain, found.node.op_type))
    if explainer is not unresolved and function and body_problems(function, checks.opsets):
        return None
    return explainer(checks, found, match)
