"""Explanations of a node whose inputs the kernel refuses: their types,
their count, or a constant input the kernel wants as an attribute."""

from __future__ import annotations

import re

import onnx
from onnx import AttributeProto, TensorProto, helper, numpy_helper

from . import probe
from .findings import Finding

# A kernel asking for an attribute: ours ("attribute nsample (int) is required",
# "attribute stride must be a list of ints"), ORT's KernelInfo ("No attribute
# with name:'nsample'is defined.").  Not any word after "attribute": ORT's
# Resize says "mode attribute is bogus", which asks for no attribute 'is'.
ASKED_ATTRIBUTE = re.compile(r"attribute(?: with name:)?\s*'?([A-Za-z_]\w*)'?\s*(?:\(\w+\)\s*)?"
                             r"(?:is required|is defined|must)")


def input_problem(checks, found, match) -> Finding:
    """ORT's type check failed (a type no kernel takes, two inputs bound to
    different types, or an input count out of range)."""
    node = found.node
    as_attribute = attribute_as_input(checks, found)
    if as_attribute:
        return as_attribute
    if "input size" in found.outcome.message:
        return checks.finding(found, "error", "input-count",
                              f"the kernel does not take {len(node.input)} inputs",
                              "match the inputs the kernel declares (ORT's message gives "
                              "the range); pass constants it reads as attributes")
    return input_types(checks, found)


def accepted_types(checks, found, indices) -> list[str]:
    """The element types that load when given to all of ``indices`` at once."""
    accepted = []
    for elem in probe.ELEMENT_TYPES:
        trial = [probe.with_elem(v, elem) if i in indices else v
                 for i, v in enumerate(found.inputs)]
        if checks.load(found.node, trial).ok:
            accepted.append(probe.type_name(elem))
    return accepted


def input_types(checks, found) -> Finding:
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
        accepted = accepted_types(checks, found, {i})
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
    return checks.finding(found, "error", "input-type", summary, fix, details=details)


def attribute_as_input(checks, found) -> Finding | None:
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
        outcome = checks.load(trimmed, inputs)
        asked = ASKED_ATTRIBUTE.search(outcome.message)
        if outcome.ok or not asked:
            continue
        attribute = _as_attribute(asked[1], value)
        if attribute is None:
            continue
        python = helper.get_attribute_value(attribute)
        trimmed.attribute.append(attribute)
        if not checks.load(trimmed, inputs).ok:
            continue
        suffix = {AttributeProto.INT: "i", AttributeProto.FLOAT: "f", AttributeProto.INTS: "is",
                  AttributeProto.FLOATS: "fs"}[attribute.type]
        return checks.finding(
            found, "error", "attribute-as-input",
            f"input {i} '{node.input[i]}' is a constant ({probe.type_text(value)} "
            f"{python!r}) that the kernel reads as attribute '{asked[1]}'",
            f"make it an attribute, {asked[1]}={python!r}, and drop the input "
            f"(torch.onnx.ops.symbolic(..., attrs={{'{asked[1]}': {python!r}}}); "
            f"TorchScript symbolic: g.op(..., {asked[1]}_{suffix}={python!r}))",
            details=[f"checked: without input {i} and with that attribute the node loads"])
    return None


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
