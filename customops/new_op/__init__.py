"""python -m customops.new_op NAMESPACE::NAME DIR: a standalone project for a
new op, from the template op ``my_ops::scaled_row_sum`` in ``template/``.

The template is a real project, built and tested by tests/test_new_op.py; the
generator only renames (the namespace, the name, its CamelCase form, file
names), so what it writes is what those tests compiled and ran.  Torch-free.
"""

from __future__ import annotations

import keyword
import re
from pathlib import Path

TEMPLATE = Path(__file__).resolve().parent / "template"
TEMPLATE_NAMESPACE, TEMPLATE_NAME = "my_ops", "scaled_row_sum"
# Made by building or testing the template in place, never part of a project.
SKIPPED = {"build", "__pycache__", ".pytest_cache"}

IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Both names become C++ and Python identifiers (kernel function, TORCH_LIBRARY
# namespace) and ONNX names; torch owns these namespaces already.
TORCH_NAMESPACES = {"aten", "prim", "prims", "torch"}
CPP_KEYWORDS = set(
    "alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t char16_t "
    "char32_t class compl concept const consteval constexpr constinit const_cast continue co_await "
    "co_return co_yield decltype default delete do double dynamic_cast else enum explicit export "
    "extern false float for friend goto if inline int long mutable namespace new noexcept not not_eq "
    "nullptr operator or or_eq private protected public register reinterpret_cast requires return "
    "short signed sizeof static static_assert static_cast struct switch template this thread_local "
    "throw true try typedef typeid typename union unsigned using virtual void volatile wchar_t while "
    "xor xor_eq".split())
RULE = ("NAMESPACE::NAME must be two identifiers (a letter or _, then letters, digits, _) that are "
        "not Python or C++ keywords, e.g. my_ops::scaled_row_sum")


class NewOpError(ValueError):
    """Refused arguments; the message is one line for the command line."""


def parse_op(spec: str) -> tuple[str, str]:
    parts = spec.split("::")
    if len(parts) != 2 or not all(IDENTIFIER.fullmatch(p) for p in parts):
        raise NewOpError(f"{spec!r}: {RULE}")
    for part in parts:
        if keyword.iskeyword(part) or part in CPP_KEYWORDS:
            raise NewOpError(f"{spec!r}: {part!r} is a keyword; {RULE}")
    if parts[0] in TORCH_NAMESPACES:
        raise NewOpError(f"{spec!r}: the namespace {parts[0]!r} belongs to torch; choose your own")
    return parts[0], parts[1]


def camel_case(name: str) -> str:
    """scaled_row_sum -> ScaledRowSum, for the C++ type names."""
    return "".join(part[:1].upper() + part[1:] for part in name.split("_")) or "Custom"


def renamer(namespace: str, name: str):
    """A function renaming the template's op in a text, in one pass (so a new
    name containing "my_ops" is not renamed again)."""
    table = {TEMPLATE_NAMESPACE: namespace, TEMPLATE_NAME: name,
             camel_case(TEMPLATE_NAME): camel_case(name)}
    pattern = re.compile("|".join(re.escape(old) for old in sorted(table, key=len, reverse=True)))
    return lambda text: pattern.sub(lambda match: table[match.group()], text)


def template_files() -> list[Path]:
    return sorted(path for path in TEMPLATE.rglob("*")
                  if path.is_file() and not SKIPPED & set(path.relative_to(TEMPLATE).parts))


def generate(spec: str, directory: str | Path) -> list[Path]:
    """Writes the project for op ``spec`` ("ns::name") into ``directory``
    (created, or existing and empty) and returns the files written."""
    namespace, name = parse_op(spec)
    target = Path(directory)
    if target.exists() and not target.is_dir():
        raise NewOpError(f"{target} is a file; DIR must be a new or empty directory")
    if target.is_dir() and any(target.iterdir()):
        raise NewOpError(f"{target} is not empty; DIR must be a new or empty directory")
    sources = template_files()
    if not sources:  # an install that left out the package data
        raise NewOpError(f"the template is missing from {TEMPLATE}; reinstall customops")
    rename = renamer(namespace, name)
    written = []
    for source in sources:
        destination = target / rename(str(source.relative_to(TEMPLATE)))
        destination.parent.mkdir(parents=True, exist_ok=True)
        destination.write_text(rename(source.read_text()))  # read_text follows the headers script's link
        written.append(destination)
    return written
