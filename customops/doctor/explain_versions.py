"""Explanations of a node that the imported opset or the runtime's kernels
do not cover: an op missing at that opset, no kernel for these types."""

from __future__ import annotations

from . import probe
from .explain_types import accepted_types
from .findings import Finding, domain_name, since_versions

# Standard ops whose ORT kernel came late, and what to use meanwhile (measured).
FIRST_RELEASE = {
    ("", "DeformConv"): ("1.25.0", "customops' custom::deform_conv2d "
                                   "(customops.deform_conv2d in torch)"),
}


def not_in_opset(checks, found, match) -> Finding:
    op_type, domain, version = match[1], found.node.domain, int(match[2])
    later = [v for v in since_versions(op_type, domain) if v > version]
    if not later:
        return checks.finding(found, "error", "op-not-in-opset",
                              f"{op_type} is not an op of {domain_name(domain)} at any opset "
                              "onnx knows", "use an op the standard has, or a custom domain")
    return checks.finding(found, "error", "op-not-in-opset",
                          f"{op_type} does not exist at {domain_name(domain)} opset {version}; "
                          f"it first appears in opset {later[0]} (onnx.defs)",
                          f"import {domain_name(domain)} opset >= {later[0]} "
                          f"(torch.onnx.export(..., opset_version={later[0]}))")


def no_kernel(checks, found, match) -> Finding:
    node = found.node
    version = checks.version(node.domain)
    first = next((v for v in found.inputs if v is not None), None)
    same = {i for i, v in enumerate(found.inputs)
            if v is not None and probe.elem_type(v) == probe.elem_type(first)}
    types = accepted_types(checks, found, same) if first is not None else []
    schemas = since_versions(node.op_type, node.domain)
    in_force = max((v for v in schemas if v <= version), default=None)
    opsets = [v for v in schemas if v != in_force
              and checks.load(found.node, found.inputs, opsets=checks.opsets | {node.domain: v}).ok]
    given = ", ".join(probe.type_text(v) for v in found.inputs if v is not None)
    details = [f"given: {given}; probed: loads at other opsets: "
               f"{', '.join(map(str, opsets)) or 'none'}; "
               f"loads with input types: {', '.join(types) or 'none'}"]
    release, alternative = FIRST_RELEASE.get((node.domain, node.op_type), (None, None))
    fixes = [f"onnxruntime >= {release} has it"] if release else []
    fixes += [f"export at opset {opsets[-1]}"] if opsets else []
    fixes += [f"cast the inputs to {types[0]}"] if types else []
    fixes += [f"use {alternative}" if alternative else "a custom kernel in your own domain"]
    return checks.finding(found, "error", "no-kernel",
                          f"onnxruntime {checks.rt.version} has no kernel for {node.op_type} "
                          f"at opset {version} with these input types", "; or ".join(fixes),
                          details=details)
