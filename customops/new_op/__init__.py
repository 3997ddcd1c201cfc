"""python -m customops.new_op "NS::NAME(ARGS) -> RETURNS" DIR [--dtypes ...] [--shapes ...]:
a standalone project for a new op, from the template op ``my_ops::scaled_row_sum``
in ``template/``.

The template is a real project, built and tested by tests/test_new_op.py.  Its
files mark each region that follows from the op's schema (``<schema:NAME>``);
the generator parses the schema (schema.py), renders those regions for it
(render.py) and renames the rest (the namespace, the name, its CamelCase form,
file names).  The math (the op's header, reference.py) is the user's: a new
schema gets a placeholder there, zeros of the declared shapes.  ``NS::NAME``
alone gives the template's own op, math included, under that name.
Torch-free.
"""

from __future__ import annotations

import re
from pathlib import Path

from .render import USER_REGIONS, render
from .schema import NewOpError, Op, build, camel_case, parse_op_name

__all__ = ["NewOpError", "generate", "parse_op_name", "template_op"]

TEMPLATE = Path(__file__).resolve().parent / "template"
TEMPLATE_NAMESPACE, TEMPLATE_NAME = "my_ops", "scaled_row_sum"
TEMPLATE_SCHEMA = "(Tensor x, Tensor? weight, float scale) -> (Tensor sum, Tensor argmax)"
TEMPLATE_SHAPES = "x: T[rows, cols]; weight: T[cols]; sum: T[rows]; argmax: int64[rows]"
# Made by building or testing the template in place, never part of a project.
SKIPPED = {"build", "__pycache__", ".pytest_cache", ".hypothesis"}
# Names of the course itself, which the renaming must leave alone.
COURSE_NAMES = ("my_ops::ball_query",)


def template_op(namespace: str = TEMPLATE_NAMESPACE, name: str = TEMPLATE_NAME) -> Op:
    return build(f"{namespace}::{name}{TEMPLATE_SCHEMA}", "float32", TEMPLATE_SHAPES)


def renamer(namespace: str, name: str):
    """A function renaming the template's op in a text, in one pass (so a new
    name containing "my_ops" is not renamed again)."""
    table = {TEMPLATE_NAMESPACE: namespace, TEMPLATE_NAME: name,
             camel_case(TEMPLATE_NAME): camel_case(name), **{n: n for n in COURSE_NAMES}}
    pattern = re.compile("|".join(re.escape(old) for old in sorted(table, key=len, reverse=True)))
    return lambda text: pattern.sub(lambda match: table[match.group()], text)


def template_files() -> list[Path]:
    return sorted(path for path in TEMPLATE.rglob("*")
                  if path.is_file() and not SKIPPED & set(path.relative_to(TEMPLATE).parts))


def parse(spec: str, dtypes: str | None = None, shapes: str | None = None) -> tuple[Op, bool]:
    """The op to generate and whether it is the template's own (NS::NAME alone)."""
    if "(" not in spec:
        if dtypes is not None or shapes is not None:
            raise NewOpError("--dtypes and --shapes need the op's schema, e.g. \"geo::f(Tensor x) -> Tensor y\"")
        return template_op(*parse_op_name(spec.strip())), True
    return build(spec, dtypes or "float32", shapes or ""), False


def generate(spec: str, directory: str | Path, dtypes: str | None = None, shapes: str | None = None) -> list[Path]:
    """Writes the project for ``spec`` ("ns::name" or a whole schema) into
    ``directory`` (created, or existing and empty) and returns the files
    written.  Everything is rendered before anything is written."""
    op, own_math = parse(spec, dtypes, shapes)
    target = Path(directory)
    if target.exists() and not target.is_dir():
        raise NewOpError(f"{target} is a file; DIR must be a new or empty directory")
    if target.is_dir() and any(target.iterdir()):
        raise NewOpError(f"{target} is not empty; DIR must be a new or empty directory")
    sources = template_files()
    if not sources:  # an install that left out the package data
        raise NewOpError(f"the template is missing from {TEMPLATE}; reinstall customops")
    rename = renamer(op.namespace, op.name)
    keep = USER_REGIONS if own_math else ()
    files = {target / rename(str(source.relative_to(TEMPLATE))):
             render(rename(source.read_text()), op, keep)  # read_text follows the headers script's link
             for source in sources}
    for destination, text in files.items():
        destination.parent.mkdir(parents=True, exist_ok=True)
        destination.write_text(text)
    return list(files)


