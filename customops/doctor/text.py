"""Every string of a model is untrusted: text that is not UTF-8 becomes a finding.

ONNX keeps names, domains, op types and metadata in protobuf ``string``
fields, which protobuf defines as UTF-8 text; a model built or edited by hand
(or damaged) can hold other bytes there.  Python's protobuf then returns
``bytes`` instead of ``str`` and refuses to store them back, so every later
step (printing, sorting, JSON, onnx.defs lookups) would fail.  The doctor
checks a copy whose bad strings are replaced by their \\xNN-escaped text and
reports each field once, with the nodes and places that hold such bytes.
"""

from __future__ import annotations

import onnx

from .findings import Finding

SHOWN = 3  # places named per field; the rest are counted


def escaped(value: bytes) -> str:
    return value.decode("utf-8", "backslashreplace")


def _walk(message, path: str, label: str, found: list, repair: bool) -> None:
    """Appends (field, place, the node's label or "", shown) to ``found`` for
    each bytes value under ``message``, and with ``repair`` replaces it by its
    escaped text.  Only string and message fields are read (not the tensors'
    data)."""
    for fd in message.DESCRIPTOR.fields:
        field = f"{path}.{fd.name}" if path else fd.name
        if fd.type == fd.TYPE_MESSAGE:
            if not fd.is_repeated and not message.HasField(fd.name):
                continue
            value = getattr(message, fd.name)
            for i, item in enumerate(value if fd.is_repeated else [value]):
                place = f"{field}[{i}]" if fd.is_repeated else field
                node_label = label
                if fd.message_type.name == "NodeProto":
                    node_label = _label(item, place if field != "graph.node" else f"#{i}")
                _walk(item, place, node_label, found, repair)
        elif fd.type == fd.TYPE_STRING:
            value = getattr(message, fd.name)
            for i, item in enumerate(value if fd.is_repeated else [value]):
                if not isinstance(item, bytes):
                    continue
                text = escaped(item)
                if repair and fd.is_repeated:
                    value[i] = text
                elif repair:
                    setattr(message, fd.name, text)
                place = f"{field}[{i}]" if fd.is_repeated else field
                found.append((_unindexed(field), place, label, text))


def _label(node, unnamed: str) -> str:
    """A node as the other findings name it: its name, or its index in the
    main graph (#3); a node elsewhere (a function, a subgraph) by its place."""
    name = escaped(node.name) if isinstance(node.name, bytes) else node.name
    return name or unnamed


def _unindexed(field: str) -> str:
    return "".join(part.split("]", 1)[-1] for part in field.split("["))


def checked_text(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[Finding]]:
    """``model`` itself if all its strings are UTF-8; else a copy with the
    others escaped, and one error per field that held them."""
    found = []
    _walk(model, "", "", found, repair=False)
    if not found:
        return model, []
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    _walk(copy, "", "", [], repair=True)
    by_field: dict = {}
    for field, place, label, text in found:
        by_field.setdefault(field, []).append((place, label, text))
    findings = []
    for field, places in by_field.items():
        labels = list(dict.fromkeys(label for _, label, _ in places if label))
        where = f" of node{'s' if len(labels) > 1 else ''} {', '.join(labels[:SHOWN])}" + (
            f" and {len(labels) - SHOWN} more" if len(labels) > SHOWN else "") if labels else ""
        details = [f"{place}: '{text}'" for place, _, text in places[:SHOWN]]
        details += [f"and {len(places) - SHOWN} more"] * (len(places) > SHOWN)
        findings.append(Finding(
            "error", "not-utf8",
            f"{field}{where} is not UTF-8 text (protobuf strings must be); shown with \\x escapes",
            "write it as UTF-8 text where the model is built (a name, domain or op type "
            "given as bytes, or a damaged file)", nodes=labels, details=details))
    return copy, findings
