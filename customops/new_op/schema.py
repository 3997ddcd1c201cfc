"""The op a project is generated for, parsed from its ``torch.library``
schema, ``--dtypes`` and ``--shapes``: what every generated region is
rendered from.  Each refusal is a NewOpError with a one-line message."""

from __future__ import annotations

import ast
import keyword
import re
from dataclasses import dataclass, field

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

# Argument kinds and the ONNX attribute type each becomes.
ATTRIBUTE_KINDS = {"float": "FLOAT", "int": "INT", "bool": "INT", "str": "STRING",
                   "int[]": "INTS", "float[]": "FLOATS"}
TENSOR_KINDS = {"Tensor", "Tensor?"}
# --dtypes: the floating types T stands for; --shapes may also name these fixed types.
FLOAT_DTYPES = ("float32", "float64", "float16")
ELEMENT_TYPES = FLOAT_DTYPES + ("int64", "int32", "bool")
# Names a project's generated code uses for itself, which an argument must not take.
RESERVED = {"self", "sizes", "context", "raw", "info", "kernel", "result", "options", "T", "Stored", "g", "op",
            "inputs", "np", "torch", "parallel_for", "begin", "end"}


class NewOpError(ValueError):
    """Refused arguments; the message is one line for the command line."""


@dataclass
class Tensor:
    name: str
    dtype: str                     # "T" or one of ELEMENT_TYPES
    dims: list                     # ints (static) and names (symbols)
    optional: bool = False
    default_none: bool = False     # the schema says `Tensor? name=None`
    group_ids: bool = False        # --shapes "batch: int64[n] sorted": sorted non-negative group ids


@dataclass
class Attribute:
    name: str
    kind: str                      # a key of ATTRIBUTE_KINDS
    default: object = None         # the schema's default, a Python value, or None

    @property
    def onnx_type(self) -> str:
        return ATTRIBUTE_KINDS[self.kind]


@dataclass
class Op:
    namespace: str
    name: str
    inputs: list                   # Tensor, in schema order
    attributes: list               # Attribute, in schema order
    outputs: list                  # Tensor
    dtypes: list = field(default_factory=lambda: ["float32"])
    order: list = field(default_factory=list)  # argument names in schema order

    @property
    def camel(self) -> str:
        return camel_case(self.name)

    def symbols(self) -> list:
        """Named sizes that inputs carry, in order of first appearance."""
        seen = []
        for tensor in self.inputs:
            seen += [d for d in tensor.dims if isinstance(d, str) and d not in seen]
        return seen

    def data_dependent(self) -> list:
        """Named sizes that only outputs carry: the kernel computes them."""
        known, seen = set(self.symbols()), []
        for tensor in self.outputs:
            seen += [d for d in tensor.dims if isinstance(d, str) and d not in known and d not in seen]
        return seen

    def where(self, symbol: str):
        """(input, axis) where a symbol is first read, a required input preferred."""
        places = [(t, axis) for t in self.inputs for axis, d in enumerate(t.dims) if d == symbol]
        return next(((t, a) for t, a in places if not t.optional), places[0])

    @property
    def schema(self) -> str:
        args = ", ".join(self._arg(name) for name in self.order)
        outs = [f"Tensor {t.name}" for t in self.outputs]
        returns = outs[0] if len(outs) == 1 else f"({', '.join(outs)})"
        return f"{self.name}({args}) -> {returns}"

    def _arg(self, name: str) -> str:
        for tensor in self.inputs:
            if tensor.name == name:
                return f"Tensor{'?' if tensor.optional else ''} {name}" + ("=None" if tensor.default_none else "")
        attribute = next(a for a in self.attributes if a.name == name)
        text = f"{attribute.kind} {name}"
        if attribute.default is not None:
            text += "=" + schema_literal(attribute.default)
        return text


def camel_case(name: str) -> str:
    """scaled_row_sum -> ScaledRowSum, for the C++ type names."""
    return "".join(part[:1].upper() + part[1:] for part in name.split("_")) or "Custom"


def schema_literal(value) -> str:
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, str):
        return '"' + value + '"'
    if isinstance(value, list):
        return "[" + ", ".join(schema_literal(v) for v in value) + "]"
    return repr(value)


def parse_op_name(spec: str) -> tuple[str, str]:
    parts = spec.split("::")
    if len(parts) != 2 or not all(IDENTIFIER.fullmatch(p) for p in parts):
        raise NewOpError(f"{spec!r}: {RULE}")
    for part in parts:
        if keyword.iskeyword(part) or part in CPP_KEYWORDS:
            raise NewOpError(f"{spec!r}: {part!r} is a keyword; {RULE}")
    if parts[0] in TORCH_NAMESPACES:
        raise NewOpError(f"{spec!r}: the namespace {parts[0]!r} belongs to torch; choose your own")
    return parts[0], parts[1]


def split_top(text: str, sep: str = ",") -> list:
    """Splits at ``sep`` outside brackets and quotes."""
    parts, depth, quote, current = [], 0, None, ""
    for char in text:
        if quote:
            quote = None if char == quote else quote
        elif char in "\"'":
            quote = char
        elif char in "([":
            depth += 1
        elif char in ")]":
            depth -= 1
        elif char == sep and depth == 0:
            parts.append(current)
            current = ""
            continue
        current += char
    return parts + [current]


def parse_default(kind: str, name: str, text: str):
    try:
        value = ast.literal_eval(text.strip())
    except (ValueError, SyntaxError):
        raise NewOpError(f"argument {name!r}: default {text.strip()!r} is not a literal") from None
    fits = {"float": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
            "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
            "bool": lambda v: isinstance(v, bool),
            "str": lambda v: isinstance(v, str),
            "int[]": lambda v: isinstance(v, list) and all(type(x) is int for x in v),
            "float[]": lambda v: isinstance(v, list) and all(type(x) in (int, float) for x in v)}
    if not fits[kind](value):
        raise NewOpError(f"argument {name!r}: default {text.strip()} is not a {kind}")
    if kind == "float":
        return float(value)
    if kind == "float[]":
        return [float(v) for v in value]
    return value


def check_name(name: str, what: str) -> None:
    if not IDENTIFIER.fullmatch(name) or keyword.iskeyword(name) or name in CPP_KEYWORDS:
        raise NewOpError(f"{what} {name!r} must be an identifier that is not a Python or C++ keyword")
    if name in RESERVED:
        raise NewOpError(f"{what} {name!r} is a name the generated code uses; rename it")


SCHEMA = re.compile(r"\s*([^(\s]+)\s*\((.*)\)\s*->\s*(.+?)\s*$", re.DOTALL)
ARGUMENT = re.compile(r"\s*(Tensor\?|Tensor|float\[\]|int\[\]|float|int|bool|str)\s+([^=\s]+)\s*(?:=(.*))?$",
                      re.DOTALL)
SCHEMA_RULE = 'a schema is NS::NAME(ARGS) -> RETURNS, e.g. "geo::f(Tensor x, float r=1.0) -> Tensor y"'


def parse_schema(text: str):
    """(namespace, name, arguments, output names) from "NS::NAME(ARGS) -> RETURNS"."""
    match = SCHEMA.fullmatch(text)
    if not match:
        raise NewOpError(f"{text!r}: {SCHEMA_RULE}")
    namespace, name = parse_op_name(match.group(1))
    arguments, names = [], set()
    if match.group(2).strip():
        for part in split_top(match.group(2)):
            argument = ARGUMENT.fullmatch(part)
            if not argument:
                kind = part.split()[0] if part.split() else ""
                raise NewOpError(
                    f"argument {part.strip()!r}: unsupported; an argument is TYPE NAME[=DEFAULT] with TYPE one of "
                    f"Tensor, Tensor?, {', '.join(ATTRIBUTE_KINDS)}" + (f" (not {kind})" if kind else ""))
            kind, arg_name, default = argument.groups()
            check_name(arg_name, "argument")
            if arg_name in names:
                raise NewOpError(f"argument {arg_name!r} appears twice")
            names.add(arg_name)
            if default is not None and kind in TENSOR_KINDS:
                if kind != "Tensor?" or default.strip() != "None":
                    raise NewOpError(f"argument {arg_name!r}: a Tensor takes no default; "
                                     f"an optional one (Tensor?) may take =None")
                default = "None"
            elif default is not None:
                default = parse_default(kind, arg_name, default)
            # The project passes the tensors first, then the attributes (the ONNX node's
            # inputs, then its attributes), and torch wants the defaults last.
            attribute = next((f"{k} {n}" for k, n, _ in arguments if k not in TENSOR_KINDS), None)
            if kind in TENSOR_KINDS and attribute:
                raise NewOpError(f"argument {arg_name!r}: Tensor arguments must come before attributes ({attribute})")
            defaulted = next((n for _, n, d in arguments if d is not None), None)
            if default is None and defaulted:
                raise NewOpError(f"argument {arg_name!r} has no default but follows {defaulted!r}, which has one: "
                                 "torch wants the arguments with a default last")
            arguments.append((kind, arg_name, default))
    if not any(kind == "Tensor" for kind, _, _ in arguments):
        raise NewOpError(f"{text!r}: the op needs at least one required Tensor argument")
    returns = match.group(3).strip()
    if returns.startswith("(") and returns.endswith(")"):
        returns = returns[1:-1]
    outputs = []
    for part in split_top(returns):
        words = part.split()
        if len(words) != 2 or words[0] != "Tensor":
            raise NewOpError(f"return {part.strip()!r}: a return is `Tensor name` or `(Tensor a, Tensor b)`")
        check_name(words[1], "output")
        if words[1] in names:
            raise NewOpError(f"output {words[1]!r} has the name of an argument")
        names.add(words[1])
        outputs.append(words[1])
    return namespace, name, arguments, outputs


SHAPE = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*:\s*([A-Za-z0-9_]+)\s*\[([^\]]*)\]\s*(\S*)\s*$")
# The one rule --shapes takes after the dims: group ids, as torch_geometric's `batch`.
SORTED_RULE = "`sorted` (sorted non-negative group ids) follows the dims of a rank-1 int64 or int32 tensor"


def parse_shapes(text: str) -> dict:
    """{"pos": ("T", ["n", 3], False), ...} from "pos: T[n,3]; batch: int64[n] sorted"
    (the third item: sorted)."""
    shapes = {}
    for entry in filter(str.strip, text.split(";")):
        match = SHAPE.fullmatch(entry)
        if not match:
            raise NewOpError(f"--shapes entry {entry.strip()!r}: expected NAME: TYPE[DIMS] [sorted], "
                             "e.g. pos: T[n,3] or batch: int64[n] sorted")
        name, dtype, dims_text, rule = match.groups()
        if rule not in ("", "sorted"):
            raise NewOpError(f"--shapes entry {entry.strip()!r}: unknown rule {rule!r}; {SORTED_RULE}")
        if dtype != "T" and dtype not in ELEMENT_TYPES:
            raise NewOpError(f"--shapes entry {entry.strip()!r}: unsupported type {dtype!r}; "
                             f"types: T, {', '.join(ELEMENT_TYPES)}")
        dims = []
        for dim in filter(None, (d.strip() for d in dims_text.split(","))):
            if dim.isdigit():
                dims.append(int(dim))
            elif IDENTIFIER.fullmatch(dim) and not keyword.iskeyword(dim) and dim not in CPP_KEYWORDS:
                dims.append(dim)
            else:
                raise NewOpError(f"--shapes entry {entry.strip()!r}: a dimension is a number or a name, not {dim!r}")
        if rule and (dtype not in ("int64", "int32") or len(dims) != 1):
            raise NewOpError(f"--shapes entry {entry.strip()!r}: {SORTED_RULE}, not {dtype}[{dims_text.strip()}]")
        if name in shapes:
            raise NewOpError(f"--shapes names {name!r} twice")
        shapes[name] = (dtype, dims, bool(rule))
    return shapes


def parse_dtypes(text: str) -> list:
    dtypes = [d.strip() for d in text.split(",") if d.strip()]
    for dtype in dtypes:
        if dtype not in FLOAT_DTYPES:
            raise NewOpError(f"--dtypes: unsupported type {dtype!r}; choose among {', '.join(FLOAT_DTYPES)}")
    if not dtypes or len(set(dtypes)) != len(dtypes):
        raise NewOpError(f"--dtypes {text!r}: a comma-separated list of distinct types among {', '.join(FLOAT_DTYPES)}")
    return dtypes


def build(schema: str, dtypes: str = "float32", shapes: str = "") -> Op:
    namespace, name, arguments, output_names = parse_schema(schema)
    declared = parse_shapes(shapes)
    tensors = [n for kind, n, _ in arguments if kind in TENSOR_KINDS] + output_names
    for entry in declared:
        if entry not in tensors:
            raise NewOpError(f"--shapes names {entry!r}, which is not a Tensor argument or output of the schema "
                             f"(those are {', '.join(tensors)})")
    first = next(n for kind, n, _ in arguments if kind == "Tensor")
    if first not in declared:
        # Not listed: type T, the first input's shape (one dimension, named after it).
        declared[first] = ("T", [f"{first}_size"], False)

    def tensor(tensor_name, optional=False, default_none=False):
        dtype, dims, ids = declared.get(tensor_name, ("T", list(declared[first][1]), False))
        return Tensor(tensor_name, dtype, dims, optional, default_none, ids)

    inputs = [tensor(n, kind == "Tensor?", default == "None") for kind, n, default in arguments if kind in TENSOR_KINDS]
    attributes = [Attribute(n, kind, default) for kind, n, default in arguments if kind not in TENSOR_KINDS]
    outputs = [tensor(n) for n in output_names]
    for t in outputs:
        if t.group_ids:
            raise NewOpError(f"--shapes: {t.name!r} is an output; `sorted` tells how to draw an input")
    op = Op(namespace, name, inputs, attributes, outputs, parse_dtypes(dtypes), [n for _, n, _ in arguments])
    symbols = op.symbols()
    for symbol in symbols + op.data_dependent():
        if symbol in {t.name for t in inputs + outputs} | {a.name for a in attributes}:
            raise NewOpError(f"--shapes: the size {symbol!r} has the name of an argument or output; rename it")
        if symbol in RESERVED or symbol in {op.name, op.namespace}:
            raise NewOpError(f"--shapes: the size {symbol!r} is a name the generated code uses; rename it")
    if not any(t.dtype == "T" for t in inputs if not t.optional) and any(t.dtype == "T" for t in inputs + outputs):
        raise NewOpError("--shapes: T is the type of a required input's elements; give one required input type T")
    for symbol in symbols:
        if all(t.optional for t in inputs if symbol in t.dims):
            raise NewOpError(f"--shapes: the size {symbol!r} appears only in optional inputs; "
                             "a required input must carry it")
    for t in outputs:
        for symbol in {d for d in t.dims if isinstance(d, str)}:
            if t.dims.count(symbol) > 1 and symbol in op.data_dependent():
                raise NewOpError(f"--shapes: the data-dependent size {symbol!r} appears twice in {t.name!r}")
    return op
