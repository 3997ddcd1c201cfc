"""What the doctor reports: one Finding per problem, and the names it uses."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import onnx


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


# onnx's schema lookups (onnx.defs.has, get_schema) take an opset version as a
# C int: a version outside this range makes them raise TypeError.  No real
# opset or IR version comes near the top (onnx 1.20: opset 25, IR 12).
VERSION_RANGE = range(1, 2**31)


def domain_name(domain: str) -> str:
    return domain or "ai.onnx"


def op_name(node) -> str:
    return f"{domain_name(node.domain)}::{node.op_type}"


@functools.cache
def since_versions(op_type: str, domain: str) -> list[int]:
    """The opsets in which the ONNX standard (this onnx package) defines or changes ``op_type``."""
    return sorted(s.since_version for s in onnx.defs.get_all_schemas_with_history()
                  if s.name == op_type and s.domain == domain)
