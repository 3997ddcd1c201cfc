"""The template's generated regions, rendered from a schema.Op.

A template file marks each region that follows from the schema with a line
holding ``<schema:NAME>`` and one holding ``</schema:NAME>``; REGIONS[NAME](op)
returns the lines between them.  The template's own regions are what these
functions give for its op (tests/test_new_op.py checks it), so generated code
is the code the template compiled and tested."""

from __future__ import annotations

import re

from math import isfinite as math_finite

from .schema import Attribute, Op, Tensor

# How each element type is stored in torch and ORT, and which type the math sees.
TORCH_SCALAR = {"float32": "at::kFloat", "float64": "at::kDouble", "float16": "at::kHalf",
                "int64": "at::kLong", "int32": "at::kInt", "bool": "at::kBool"}
ORT_STORAGE = {"float32": "float", "float64": "double", "float16": "Ort::Float16_t",
               "int64": "int64_t", "int32": "int32_t", "bool": "bool"}
MATH_TYPE = {"float32": "float", "float64": "double", "float16": "float",  # float16 computes in float
             "int64": "int64_t", "int32": "int32_t", "bool": "bool", "T": "T"}
ONNX_ELEMENT = {"float32": "FLOAT", "float64": "DOUBLE", "float16": "FLOAT16", "int64": "INT64",
                "int32": "INT32", "bool": "BOOL"}
NUMPY = {"float32": "np.float32", "float64": "np.float64", "float16": "np.float16",
         "int64": "np.int64", "int32": "np.int32", "bool": "np.bool_"}
CPP_ATTRIBUTE = {"float": "double", "int": "int64_t", "bool": "bool", "str": "std::string",
                 "int[]": "std::vector<int64_t>", "float[]": "std::vector<double>"}
CPP_PARAMETER = {"float": "double", "int": "int64_t", "bool": "bool", "str": "const std::string&",
                 "int[]": "const std::vector<int64_t>&", "float[]": "const std::vector<double>&"}
TORCH_PARAMETER = {"float": "double", "int": "int64_t", "bool": "bool", "str": "c10::string_view",
                   "int[]": "c10::ArrayRef<int64_t>", "float[]": "c10::ArrayRef<double>"}
PARSE_ARGS = {"float": "f", "int": "i", "bool": "b", "str": "s", "int[]": "is", "float[]": "fs"}
SYMBOLIC_SUFFIX = {"float": "f", "int": "i", "bool": "i", "str": "s", "int[]": "i", "float[]": "f"}
ONNXSCRIPT_PARAMETER = {"float": "float", "int": "int", "bool": "bool", "str": "str",
                        "int[]": "Sequence[int]", "float[]": "Sequence[float]"}
# Attribute values the exported models are written with when the schema gives no default.
EXAMPLE_VALUE = {"float": 0.5, "int": 2, "bool": True, "str": "a", "int[]": [1, 2], "float[]": [0.5, 1.5]}


def dims_text(dims) -> str:
    return ", ".join(map(str, dims))


def tensor_comment(t: Tensor) -> str:
    note = ", optional (nullptr when absent)" if t.optional else ""
    return f"{t.name}: {t.dtype} ({dims_text(t.dims)}){note}"


def first_t(op: Op) -> Tensor:
    """The required input whose element type is T: the dtype dispatch reads it."""
    return next((t for t in op.inputs if t.dtype == "T" and not t.optional), op.inputs[0])


def math_parameters(op: Op) -> list:
    """The math's parameters, in the order every binding passes them."""
    params = [f"const {MATH_TYPE[t.dtype]}* {t.name}" for t in op.inputs]
    params += [f"{CPP_PARAMETER[a.kind]} {a.name}" for a in op.attributes]
    params += [f"int64_t {s}" for s in op.symbols() + op.data_dependent()]
    params += [f"{MATH_TYPE[t.dtype]}* {t.name}" for t in op.outputs]
    return params + ["const ParallelFor& parallel_for"]  # parallel.h: the runtime's threads


def output_symbols(op: Op) -> list:
    """The inputs' named sizes that some output's shape uses."""
    used = {d for t in op.outputs for d in t.dims}
    return [s for s in op.symbols() if s in used]


def size_rule_parameters(op: Op) -> list:
    return math_parameters(op)[:len(op.inputs) + len(op.attributes) + len(op.symbols())]


def wrap(head: str, items: list, tail: str, indent: int, width: int = 110) -> str:
    """head(a, b, c)tail, filled up to ``width`` columns, continuation lines indented."""
    text, line = head, head
    for i, item in enumerate(items):
        piece = item + (", " if i < len(items) - 1 else tail)
        if len(line) + len(piece.rstrip()) > width and line.strip() and line != head:
            text, line = text.rstrip() + "\n" + " " * indent, " " * indent
        text, line = text + piece, line + piece
    return text if items else head + tail


def count(t: Tensor) -> str:
    return " * ".join(map(str, t.dims)) or "1"


# --- csrc/NAME.h: the user's file, its placeholder -----------------------------------------

def math(op: Op) -> list:
    args = [tensor_comment(t) for t in op.inputs] + [f"{a.name}: {a.kind}" for a in op.attributes]
    outs = [tensor_comment(t) for t in op.outputs]
    out = [f"// {op.namespace}::{op.name}, the math alone (no PyTorch, no ONNX Runtime): both bindings",
           "// call these functions, so they agree by construction.  T is the element type",
           f"// ({', '.join(op.dtypes)}; float16 is computed in float).  Sizes are named as in --shapes.",
           "//   inputs:  " + "; ".join(args),
           "//   outputs: " + "; ".join(outs),
           "// Throw std::invalid_argument for an input the math refuses: PyTorch raises a",
           "// ValueError with its text, ORT returns it as an INVALID_ARGUMENT status.",
           "#pragma once",
           "#include <algorithm>",
           "#include <cmath>",
           "#include <cstdint>",
           "#include <stdexcept>",
           "#include <string>",
           "#include <vector>",
           "",
           '#include "parallel.h"',
           "",
           "// The attributes, checked once per ORT session (and on each PyTorch call).",
           wrap(f"inline void check_{op.name}_attributes(",
                [f"{CPP_PARAMETER[a.kind]} {a.name}" for a in op.attributes], ") {}", 4),
           ""]
    for symbol in op.data_dependent():
        out += [f"// The size {symbol}, which only the data determine: computed before any output is",
                "// allocated.  Placeholder: 0.  Write the rule here.",
                "template <typename T>",
                wrap(f"int64_t {op.name}_{symbol}(", size_rule_parameters(op), ") {", 4),
                "  return 0;",
                "}",
                ""]
    out += ["// The outputs are allocated with the declared shapes.  Placeholder: zeros.  Write the math here,",
            "// its loop over independent items in parallel_for(begin, end, grain, fn) (parallel.h).",
            "template <typename T>",
            wrap(f"void {op.name}(", math_parameters(op), ") {", 4)]
    out += [f"  parallel_for(0, {count(t)}, 4096, [&](int64_t begin, int64_t end) "
            f"{{ std::fill({t.name} + begin, {t.name} + end, {MATH_TYPE[t.dtype]}{{0}}); }});" for t in op.outputs]
    return out + ["}"]


def reference(op: Op) -> list:
    optional = {t.name for t in op.inputs if t.optional}
    names = [f"{n}=None" if n in optional else p for n, p in zip(op.order, python_parameters(op))]
    if any("=" in a and "=" not in b for a, b in zip(names, names[1:])):
        names.insert(0, "*")  # called by name: an absent optional input is left out
    body = ["def reference(" + ", ".join(names) + "):",
            f'    """The outputs of {op.namespace}::{op.name}, in the schema\'s order.  Placeholder: zeros',
            '    of the declared shapes (a data-dependent size 0), as the placeholder kernel gives."""']
    for symbol in op.symbols():
        tensor, axis = op.where(symbol)
        body.append(f"    {symbol} = np.shape({tensor.name})[{axis}]")
    body += [f"    {symbol} = 0" for symbol in op.data_dependent()]
    t = first_t(op)
    outs = []
    for out in op.outputs:
        dtype = f"np.asarray({t.name}).dtype" if out.dtype == "T" else NUMPY[out.dtype]
        shape = "(" + "".join(f"{d}, " for d in out.dims).rstrip(" ") + ")" if len(out.dims) == 1 else \
            "(" + dims_text(out.dims) + ")"
        outs.append(f"np.zeros({shape}, {dtype})")
    body.append("    return " + ", ".join(outs))
    return body


def math_tests(op: Op) -> list:
    return ["import torch",
            "",
            "import op  # noqa: F401  (loads the op)",
            "",
            f"OP = torch.ops.{op.namespace}.{op.name}",
            "",
            "# The cases the generated tests cannot know: a known answer, a tie, an input",
            "# the math refuses (pytest.raises(ValueError, match=...) on OP; conftest.run_ort",
            "# for ORT, which raises OrtError).  `python -m customops.new_op my_ops::scaled_row_sum DIR`",
            "# writes the template op, whose tests/test_math.py has one of each."]


# --- csrc/sizes.h: the shape checks both bindings share -------------------------------------

def sizes(op: Op) -> list:
    params = [f"const std::vector<int64_t>& {t.name}" if not t.optional else
              f"const std::optional<std::vector<int64_t>>& {t.name}" for t in op.inputs]
    out = [f"// The sizes of {op.namespace}::{op.name}'s inputs: "
           + "; ".join(f"{t.name} ({dims_text(t.dims)})" for t in op.inputs) + ".",
           wrap(f"inline Sizes {op.name}_sizes(", params, ") {", 4),
           "  Sizes sizes;"]
    for t in op.inputs:
        dims = ", ".join(f'{{"{d}"}}' if isinstance(d, str) else f"{{{d}}}" for d in t.dims)
        call = f'match_shape("{op.name}", "{t.name}", {"*" if t.optional else ""}{t.name}, {{{dims}}}, sizes);'
        out.append(f"  if ({t.name}) {call}" if t.optional else f"  {call}")
    return out + ["  return sizes;", "}"]


# --- csrc/torch_binding.cpp ---------------------------------------------------------------------

def torch_kernel(op: Op) -> list:
    t = first_t(op)
    ret = "at::Tensor" if len(op.outputs) == 1 else \
        "std::tuple<" + ", ".join("at::Tensor" for _ in op.outputs) + ">"
    attrs = [f"{TORCH_PARAMETER[a.kind]} {a.name}" for a in op.attributes]
    tensor_params = [f"const at::Tensor& {x.name}" if not x.optional else
                     f"const std::optional<at::Tensor>& {x.name}" for x in op.inputs]
    params = []
    for name in op.order:
        params += [p for p in tensor_params + attrs if p.endswith(" " + name)]
    # the values the math takes: strings and lists as std:: types
    values = {a.name: {"str": f"std::string({a.name})", "int[]": f"{a.name}.vec()",
                       "float": f"as_onnx_float({a.name})", "float[]": f"as_onnx_floats({a.name})"}.get(a.kind, a.name)
              for a in op.attributes}
    out = ["template <typename T>",
           wrap(f"{ret} {op.name}_typed(", params + ["const Sizes& sizes"], ") {", 4)]
    for x in op.inputs:
        scalar = "math_type<T>()" if x.dtype == "T" else \
            ("at::kFloat" if x.dtype == "float16" else TORCH_SCALAR[x.dtype])
        if x.optional:
            out.append(f"  const at::Tensor {x.name}_ = {x.name} ? {x.name}->to({scalar}).contiguous() : at::Tensor();")
        else:
            out.append(f"  const at::Tensor {x.name}_ = {x.name}.to({scalar}).contiguous();")
    for symbol in op.symbols():
        out.append(f'  const int64_t {symbol} = sizes.at("{symbol}");')
    pointers = [f"{x.name}_.defined() ? {x.name}_.data_ptr<{MATH_TYPE[x.dtype]}>() : nullptr" if x.optional
                else f"{x.name}_.data_ptr<{MATH_TYPE[x.dtype]}>()" for x in op.inputs]
    pointers += [values[a.name] for a in op.attributes] + op.symbols()
    for symbol in op.data_dependent():
        out.append(wrap(f"  const int64_t {symbol} = checked_size(\"{op.name}\", \"{symbol}\", {op.name}_{symbol}<T>(",
                        pointers, "));", 6))
    for x in op.outputs:
        scalar = "math_type<T>()" if x.dtype == "T" else \
            ("at::kFloat" if x.dtype == "float16" else TORCH_SCALAR[x.dtype])
        out.append(f"  at::Tensor {x.name} = at::empty({{{dims_text(x.dims)}}}, {t.name}.options().dtype({scalar}));")
    out.append(wrap(f"  {op.name}<T>(", pointers + op.data_dependent() +
                    [f"{x.name}.data_ptr<{MATH_TYPE[x.dtype]}>()" for x in op.outputs] + ["torch_parallel_for"],
                    ");", 4))
    stored = [f"{x.name}.to({t.name}.scalar_type())" if x.dtype == "T" else
              (f"{x.name}.to(at::kHalf)" if x.dtype == "float16" else x.name) for x in op.outputs]
    out.append(f"  return {stored[0]};" if len(stored) == 1 else "  return {" + ", ".join(stored) + "};")
    out += ["}", ""]

    # the entry point: dtypes, sizes and attributes checked, then the dispatch over T
    out.append(wrap(f"{ret} {op.name}_cpu(", params, ") {", 4))
    allowed = "{" + ", ".join(TORCH_SCALAR[d] for d in op.dtypes) + "}"
    for x in op.inputs:
        if x is t:
            out.append(f'  check_dtype("{op.name}", "{x.name}", {x.name}, {allowed});')
        elif x.dtype == "T":
            out.append(f'  check_dtype("{op.name}", "{x.name}", {x.name}, {{{t.name}.scalar_type()}});')
        else:
            out.append(f'  check_dtype("{op.name}", "{x.name}", {x.name}, {{{TORCH_SCALAR[x.dtype]}}});')
    shapes = [f"{x.name} ? std::optional({x.name}->sizes().vec()) : std::nullopt" if x.optional
              else f"{x.name}.sizes().vec()" for x in op.inputs]
    checks = [wrap(f"    check_{op.name}_attributes(", [values[a.name] for a in op.attributes], ");", 8),
              wrap(f"    const Sizes sizes = {op.name}_sizes(", shapes, ");", 8)]
    call = ", ".join([name for name in op.order] + ["sizes"])
    out += ["  return value_errors([&] {", *checks]
    if len(op.dtypes) == 1:
        compute = "double" if op.dtypes == ["float64"] else "float"
        out.append(f"    return {op.name}_typed<{compute}>({call});")
    else:
        out.append(f"    switch ({t.name}.scalar_type()) {{")
        if "float64" in op.dtypes:
            out.append(f"      case at::kDouble: return {op.name}_typed<double>({call});")
        out += [f"      default: return {op.name}_typed<float>({call});"
                + ("  // float32, and float16 computed in float" if "float16" in op.dtypes else ""),
                "    }"]
    out += ["  });", "}"]
    return out


def torch_schema(op: Op) -> list:
    schema = op.schema.replace("\\", "\\\\").replace('"', '\\"')
    return [f'  m.def("{schema}");']


def python_parameters(op: Op) -> list:
    """The schema's arguments as Python parameters, with their defaults (the
    dispatcher leaves out an argument equal to its default)."""
    defaults = {a.name: a.default for a in op.attributes if a.default is not None}
    defaults.update({x.name: None for x in op.inputs if x.default_none})
    return [f"{name}={defaults[name]!r}" if name in defaults else name for name in op.order]


# --- op.py: its docstring and the fake kernel ---------------------------------------------------------------------

def op_doc(op: Op) -> list:
    outs = ", ".join(x.name for x in op.outputs)
    optional = [x.name for x in op.inputs if x.optional]
    out = [f'"""{op.namespace}::{op.name} in PyTorch: importing this module loads the compiled',
           "op (built by `make`) and registers its fake kernel.  Then call it with the",
           "arguments of its schema (schema.SCHEMA), e.g.",
           "",
           f"    {outs} = torch.ops.{op.namespace}.{op.name}({', '.join(python_parameters(op))})"]
    if optional:
        out += ["", f"with None for an absent {' or '.join(optional)}."]
    return out + ['"""']


def fake(op: Op) -> list:
    t = first_t(op)
    params = ", ".join(python_parameters(op))
    out = [f'@torch.library.register_fake("{op.namespace}::{op.name}")',
           f"def _({params}):",
           "    # torch.export runs the op on fake tensors (shapes, no data): state the sizes",
           "    # the kernel requires, so export refuses what the kernel would."]
    for x in op.inputs:
        indent = "    "
        if x.optional:
            out.append(f"    if {x.name} is not None:")
            indent = "        "
        out.append(f'{indent}torch._check({x.name}.dim() == {len(x.dims)}, lambda: "{op.name}: {x.name} must have rank {len(x.dims)}")')
        for axis, d in enumerate(x.dims):
            if isinstance(d, int):
                out.append(f'{indent}torch._check({x.name}.shape[{axis}] == {d}, lambda: "{op.name}: {x.name} must have {d} at dimension {axis}")')
            else:
                first, first_axis = op.where(d)
                if (first.name, first_axis) != (x.name, axis):
                    out.append(f'{indent}torch._check({x.name}.shape[{axis}] == {first.name}.shape[{first_axis}], '
                               f'lambda: "{op.name}: {x.name} must have {d} = {first.name}.shape[{first_axis}] at dimension {axis}")')
    for symbol in output_symbols(op):
        first, axis = op.where(symbol)
        out.append(f"    {symbol} = {first.name}.shape[{axis}]")
    for symbol in op.data_dependent():
        out.append(f"    {symbol} = torch.library.get_ctx().new_dynamic_size()  # known only from the data")
    outs = []
    for x in op.outputs:
        dtype = "" if x.dtype == "T" else f", dtype=torch.{x.dtype}"
        shape = "(" + dims_text(x.dims) + ("," if len(x.dims) == 1 else "") + ")"
        outs.append(f"{t.name}.new_empty({shape}{dtype})")
    out.append("    return " + ", ".join(outs))
    return out


# --- to_onnx.py: the translation and the symbolic --------------------------------------------------

def onnxscript_type(op: Op, x: Tensor) -> str:
    if x.dtype != "T":
        return ONNX_ELEMENT[x.dtype]
    return ONNX_ELEMENT[op.dtypes[0]] if len(op.dtypes) == 1 else "TensorType"


def translation(op: Op) -> list:
    params = []
    for name in op.order:
        x = next((x for x in op.inputs if x.name == name), None)
        if x is not None:
            kind = onnxscript_type(op, x)
            # torch leaves out an argument equal to its default: `Tensor? name=None` needs one here
            default = " = None" if x.default_none else ""
            params.append(f"{name}: Optional[{kind}]{default}" if x.optional else f"{name}: {kind}")
        else:
            a = next(a for a in op.attributes if a.name == name)
            default = "" if a.default is None else f" = {a.default!r}"
            params.append(f"{name}: {ONNXSCRIPT_PARAMETER[a.kind]}{default}")
    outs = [onnxscript_type(op, x) for x in op.outputs]
    ret = outs[0] if len(outs) == 1 else "tuple[" + ", ".join(outs) + "]"
    names = ", ".join(x.name for x in op.outputs)
    call = [x.name for x in op.inputs] + [f"{a.name}={a.name}" for a in op.attributes]
    return ["@onnxscript.script(onnxscript.values.Opset(\"" + op.namespace + "_translations\", 1))",
            wrap("def translation(", params, f") -> {ret}:", 4),
            wrap(f"    {names} = custom.{op.name}(", call, ")", 8),
            f"    return {names}"]


def symbolic(op: Op) -> list:
    letters = ", ".join('"v"' if any(x.name == n for x in op.inputs) else
                        f'"{PARSE_ARGS[next(a for a in op.attributes if a.name == n).kind]}"' for n in op.order)
    out = [f"@parse_args({letters})", f"def symbolic(g, {', '.join(op.order)}):"]
    names = [x.name for x in op.inputs]
    if any(x.optional for x in op.inputs):
        out.append(f"    inputs = omit_absent([{', '.join(names)}])")
        tensors = "*inputs"
    else:
        tensors = ", ".join(names)
    kwargs = []
    for a in op.attributes:
        value = f"int({a.name})" if a.kind == "bool" else a.name
        kwargs.append(f"{a.name}_{SYMBOLIC_SUFFIX[a.kind]}={value}")
    result = ", ".join(x.name for x in op.outputs)
    extra = [f"outputs={len(op.outputs)}"] if len(op.outputs) > 1 else []
    out.append(wrap(f'    {result} = g.op("{op.namespace}::{op.name}", ', [tensors] + kwargs + extra, ")", 8))
    out += ["    # The legacy exporter cannot infer an unknown op's outputs: state each one's",
            "    # dtype and sizes (a dynamic size is None, named by export.py's dynamic_axes)."]
    t = first_t(op)
    for symbol in output_symbols(op):
        first, axis = op.where(symbol)
        out.append(f"    {symbol} = {first.name}.type().varyingSizes()[{axis}]")
    for symbol in op.data_dependent():
        out.append(f"    {symbol} = None  # known only from the data")
    for x in op.outputs:
        dtype = "" if x.dtype == "T" else f".with_dtype(torch.{x.dtype})"
        out.append(f"    {x.name}.setType({t.name}.type(){dtype}.with_sizes([{dims_text(x.dims)}]))")
    out.append(f"    return {result}")
    return out


# --- schema.py: the op as data, for export.py and the tests ------------------------------------------

def py(value) -> str:
    """A Python literal in the project's style (double quotes)."""
    if isinstance(value, float) and not math_finite(value):
        return f'float("{value}")'  # nan, inf, -inf
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "[" + ", ".join(map(py, value)) + "]"
    if isinstance(value, tuple):
        return "(" + ", ".join(map(py, value)) + ("," if len(value) == 1 else "") + ")"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{py(k)}: {py(v)}" for k, v in value.items()) + "}"
    return repr(value)


def exported_value(a: Attribute):
    return a.default if a.default is not None else EXAMPLE_VALUE[a.kind]


def unique(values) -> list:
    """``values`` without repeats, in order (nan once)."""
    out = []
    for v in values:
        if not any(v == u or (v != v and u != u) for u in out if type(u) is type(v)):
            out.append(v)
    return out


def domain(a: Attribute) -> list:
    """The values the tests run an attribute at, the exported one first (Hypothesis
    shrinks toward it): a bool both ways; an int at its default, the exported value
    and their neighbours; a float there and at the edges (0, a negative, non-finite);
    a str at the exported value and the empty string; a list of length 0, 1, several."""
    value = exported_value(a)
    if a.kind == "bool":
        return [value, not value]
    if a.kind == "int":
        return unique([value] + [v + step for v in unique([value, a.default or value]) for step in (-1, 0, 1)])
    if a.kind == "float":
        return unique([value, a.default if a.default is not None else value, 0.0, -abs(value) or -1.0,
                       float("inf"), float("nan")])
    if a.kind == "str":
        return unique([value, ""])
    several = value if len(value) > 1 else (value or EXAMPLE_VALUE[a.kind]) * 2
    return unique([value, [], several[:1], several])


def grown(op: Op) -> list:
    """The sizes the large samples grow: those of group ids and those the op reduces
    (carried by no output); every size when there are none."""
    outputs = {d for t in op.outputs for d in t.dims}
    grow = [s for s in op.symbols() if any(s in t.dims for t in op.inputs if t.group_ids) or s not in outputs]
    return grow or op.symbols()


def schema_module(op: Op) -> list:
    def tensors(items):
        return py({x.name: (x.dtype, x.dims) for x in items})

    return [f"NAMESPACE, NAME = {py(op.namespace)}, {py(op.name)}",
            f"SCHEMA = {py(op.namespace + '::' + op.schema)}",
            f"DTYPES = {py(op.dtypes)}  # what T stands for",
            f"INPUTS = {tensors(op.inputs)}  # name: (element type, sizes)",
            f"OPTIONAL = {py([x.name for x in op.inputs if x.optional])}",
            f"GROUP_IDS = {py([x.name for x in op.inputs if x.group_ids])}  # `sorted` in --shapes",
            f"OUTPUTS = {tensors(op.outputs)}",
            f"DATA_DEPENDENT = {py(op.data_dependent())}  # sizes only the kernel computes",
            f"GROWN = {py(grown(op))}  # the sizes the large samples grow",
            f"ATTRIBUTES = {py({a.name: a.onnx_type for a in op.attributes})}  # ONNX types",
            f"EXPORTED = {py({a.name: exported_value(a) for a in op.attributes})}  "
            "# the attribute values export.py writes into the models",
            "# The values the tests run each attribute at (the others at EXPORTED): add those your math",
            "# treats apart (each `str` it accepts).  The reference raises ValueError for a value the math",
            "# refuses; PyTorch and ORT (at session creation) must then refuse it too.",
            f"VALUES = {py({a.name: domain(a) for a in op.attributes})}"]


# --- csrc/ort_op.cc -----------------------------------------------------------------------------

def ort_attributes(op: Op) -> list:
    return [f"  {CPP_ATTRIBUTE[a.kind]} {a.name};" for a in op.attributes]


def ort_compute(op: Op) -> list:
    out = []
    for index, x in enumerate(op.inputs):
        get = f"optional_input(context, {index})" if x.optional else f"context.GetInput({index})"
        out.append(f"      const Ort::ConstValue {x.name} = {get};")
    shapes = [f"optional_shape({x.name})" if x.optional else f"shape_of({x.name})" for x in op.inputs]
    out.append(wrap(f"      const Sizes sizes = {op.name}_sizes(", shapes, ");", 10))
    for symbol in op.symbols():
        out.append(f'      const int64_t {symbol} = sizes.at("{symbol}");')

    def storage(x):
        return "Stored" if x.dtype == "T" else ORT_STORAGE[x.dtype]

    for x in op.inputs:
        out.append(f"      const Input<{storage(x)}> {x.name}_({x.name});")
    pointers = [f"{x.name}_.data()" for x in op.inputs] + [a.name for a in op.attributes] + op.symbols()
    for symbol in op.data_dependent():
        out.append(wrap(f"      const int64_t {symbol} = checked_size(\"{op.name}\", \"{symbol}\", {op.name}_{symbol}<T>(",
                        pointers, "));", 10))
    for index, x in enumerate(op.outputs):
        out.append(f"      Output<{storage(x)}> {x.name}(context, {index}, {{{dims_text(x.dims)}}});")
    out.append(wrap(f"      {op.name}<T>(", pointers + op.data_dependent() + [f"{x.name}.data()" for x in op.outputs]
                    + ["ort_parallel_for(context)"], ");", 8))
    out += [f"      {x.name}.store();" for x in op.outputs if x.dtype in ("T", "float16")]
    return out


def ort_shape(op: Op) -> list:
    out = []
    for symbol in output_symbols(op):
        first, axis = op.where(symbol)
        index = op.inputs.index(first)
        out.append(f'    const Dim {symbol} = input_dim(context, {index}, {len(first.dims)}, {axis}, "{symbol}");')
    for symbol in op.data_dependent():
        out.append(f'    const Dim {symbol}{{-1, "{symbol}"}};  // known only from the data: named, never a number')
    t = first_t(op)
    if any(x.dtype == "T" for x in op.outputs):  # the input's type, whichever op of ours ORT asks
        out.append(f"    const ONNXTensorElementDataType T = input_type(context, {op.inputs.index(t)});")
    for index, x in enumerate(op.outputs):
        dims = ", ".join(d if isinstance(d, str) else f"Dim{{{d}}}" for d in x.dims)
        kind = "T" if x.dtype == "T" else f"ONNX_TENSOR_ELEMENT_DATA_TYPE_{ONNX_ELEMENT[x.dtype]}"
        out.append(f"    set_output(context, {index}, {kind}, {{{dims}}});")
    return out


def ort_types(op: Op) -> list:
    def element(x):
        return "element_type<Stored>()" if x.dtype == "T" else f"ONNX_TENSOR_ELEMENT_DATA_TYPE_{ONNX_ELEMENT[x.dtype]}"

    def table(items):
        return "{" + ", ".join(element(x) for x in items) + "}"

    return [f"  static constexpr size_t kInputs = {len(op.inputs)}, kOutputs = {len(op.outputs)};",
            f"  ONNXTensorElementDataType GetInputType(size_t index) const {{",
            f"    const ONNXTensorElementDataType types[] = {table(op.inputs)};",
            "    return types[index];",
            "  }",
            "  OrtCustomOpInputOutputCharacteristic GetInputCharacteristic(size_t index) const {",
            f"    const bool optional[] = {{{', '.join('true' if x.optional else 'false' for x in op.inputs)}}};",
            "    return optional[index] ? INPUT_OUTPUT_OPTIONAL : INPUT_OUTPUT_REQUIRED;",
            "  }",
            f"  ONNXTensorElementDataType GetOutputType(size_t index) const {{",
            f"    const ONNXTensorElementDataType types[] = {table(op.outputs)};",
            "    return types[index];",
            "  }"]


def ort_create(op: Op) -> list:
    out = [f"      auto kernel = std::make_unique<{op.camel}Kernel<Stored>>();"]
    for a in op.attributes:
        default = "" if a.default is None else ", " + cpp_literal(a.kind, a.default)
        out.append(f'      kernel->{a.name} = read_{attribute_reader(a.kind)}(info, "{a.name}"{default});')
    out.append(wrap(f"      check_{op.name}_attributes(", [f"kernel->{a.name}" for a in op.attributes], ");", 8))
    return out


def attribute_reader(kind: str) -> str:
    return {"float": "float", "int": "int", "bool": "bool", "str": "string",
            "int[]": "ints", "float[]": "floats"}[kind]


def cpp_literal(kind: str, value) -> str:
    if kind == "bool":
        return "true" if value else "false"
    if kind == "str":
        return '"' + value + '"'
    if kind in ("int[]", "float[]"):
        return CPP_ATTRIBUTE[kind] + "{" + ", ".join(cpp_literal(kind[:-2], v) for v in value) + "}"
    if kind == "float":
        return repr(float(value))
    return str(value)


def ort_register(op: Op) -> list:
    storage = {"float32": "float", "float64": "double", "float16": "Ort::Float16_t"}
    out = ["  // One op per dtype, all named " + op.name + "; they and their domain outlive every session."]
    for dtype in op.dtypes:
        out.append(f"  static {op.camel}Op<{storage[dtype]}> op_{dtype}{{runtime}};")
    out += ["  static Ort::CustomOpDomain domain = [version] {",
            f'    Ort::CustomOpDomain d("{op.namespace}");']
    for dtype in op.dtypes:
        out += [f"    op_{dtype}.version = version;  // the op's API version: older runtimes refuse a newer one",
                f"    d.Add(&op_{dtype});"]
    return out + ["    return d;", "  }();"]


# --- README.md ---------------------------------------------------------------------------------

def readme(op: Op) -> list:
    rows = [f"| `{t.name}` | input{' (optional)' if t.optional else ''} | {t.dtype} | ({dims_text(t.dims)}) |"
            for t in op.inputs]
    rows += [f"| `{a.name}` | attribute | {a.kind} → {a.onnx_type} | |" for a in op.attributes]
    rows += [f"| `{t.name}` | output | {t.dtype} | ({dims_text(t.dims)}) |" for t in op.outputs]
    out = [f"# {op.namespace}::{op.name}", "",
           "A custom operator, from one C++ header to PyTorch, ONNX, ONNX Runtime (ORT) and a C++ program,",
           "generated from its schema:", "",
           f"    {op.namespace}::{op.schema}", "",
           f"`T` is {' or '.join(op.dtypes)}" + (" (float16 is computed in float)" if "float16" in op.dtypes else "")
           + "; named sizes stay dynamic in the exported models and keep their names.", "",
           "| name | kind | type | shape |", "|---|---|---|---|", *rows, "",
           "## Write the math: two files, then `make test`", "",
           f"1. `csrc/{op.name}.h`: the body of `{op.name}`, which fills the outputs (allocated with the",
           "   shapes above)" + "".join(f", and of `{op.name}_{s}`, the rule that computes `{s}` from the data"
                                     for s in op.data_dependent()) + ".",
           f"   If an attribute can be wrong, refuse it in `check_{op.name}_attributes`. Throw",
           "   `std::invalid_argument` for an input the math refuses. A project generated from a new schema",
           "   starts with a placeholder that writes zeros" + "".join(f" and `{s}` = 0" for s in op.data_dependent())
           + ", so its tests pass before you write anything.",
            "2. `reference.py`: `reference`, the same outputs in numpy, written independently: every test compares",
            "   each route (PyTorch, both exported models in ORT, the C++ host) against it.",
            "",
            "",
            "Optionally: `VALUES` in `schema.py`, the values the tests run each attribute at (add each `str`",
            "your math accepts; the reference raises `ValueError` for a value the math refuses), `EXPORTED`",
            "for the attribute values the models are exported with, `draw` in `samples.py` if the math needs",
            "particular inputs (positive, ...), `tests/test_math.py` for cases of your own. Everything else",
            "follows from the schema: to change the schema, generate a new project and carry these files over."]
    ids = [t.name for t in op.inputs if t.group_ids]
    if ids:
        out += ["", f"{', '.join(f'`{n}`' for n in ids)} holds group ids (`sorted` in `--shapes`): the samples draw sorted",
                "non-negative ids with every group present, one group, every row its own group, an id with no",
                "rows between two others, and group 0 empty (`ID_PATTERNS` in `samples.py`); the math must take",
                "each (an empty group included)."]
    return out


def readme_size(op: Op) -> list:
    first = {s: next(t for t in op.outputs if s in t.dims) for s in op.data_dependent()}
    places = [f"`{s}` of `{t.name}: {t.dtype}[{dims_text(t.dims)}]`" for s, t in first.items()]
    which = ", ".join(places) or \
        "none in this op: a size named only in outputs, as `E` in `--shapes \"edge_index: int64[2,E]\"`"
    return [f"- **A size only the data give** ({which}):",
            "  the fake kernel in `op.py` takes it from `torch.library.get_ctx().new_dynamic_size()`; the ORT op",
            "  computes it before it allocates the output; `export.py` names it in the models (the torch 2.x",
            "  exporter calls it `u0`). *13_op_patterns.ipynb, § 4.*"]


def readme_run(op: Op) -> list:
    model, library = f"build/{op.name}_{op.dtypes[0]}.onnx", f"build/lib{op.name}_ort.so"
    ins = [f"run/{x.name}.npy" for x in op.inputs]
    outs = [f"run/{x.name}.npy" for x in op.outputs]
    feeds = ", ".join(f'"{x.name}": np.load("run/{x.name}.npy")' for x in op.inputs)
    out = ["## Running the model", "",
           f"`{model}` (one model per exporter and dtype, see `export.py`) takes one `.npy` file per input.",
           "Write a sample into `run/` (inputs drawn as the tests draw them):", "",
           f"    mkdir -p run && python -c \"import numpy as np, samples; [np.save(f'run/{{k}}.npy', a) for k, a in "
           f"samples.sample('{op.dtypes[0]}', np.random.default_rng(0)).items()]\"", "",
           f"The C++ host reads {', '.join(ins)} and writes {', '.join(outs)}:", "",
           f"    build/host {model} {library} run", "",
           "The course's `run_model` (`make cpp` in the course builds `build/cpp/run_model`) does the same:", "",
           f"    path/to/run_model --library {library} {model} "
           + " ".join(f"{x.name}=run/{x.name}.npy" for x in op.inputs) + " --out run", "",
           "In Python, all a deployment needs is the model, the library and onnxruntime (no torch). Choose the",
           "python that runs it: yours, or that of a venv holding an older onnxruntime release, which",
           "`python -m customops.envs` builds once, caches and prints:", "",
           "    ORT_PYTHON=python                                            # the onnxruntime you have",
           "    ORT_PYTHON=$(python -m customops.envs onnxruntime==1.24.4)   # or an older release",
           "    \"$ORT_PYTHON\" - <<'EOF'",
           "    import numpy as np",
           "    import onnxruntime",
           "    options = onnxruntime.SessionOptions()",
           f'    options.register_custom_ops_library("{library}")',
           f'    session = onnxruntime.InferenceSession("{model}", options)',
           f"    print(onnxruntime.__version__, session.run(None, {{{feeds}}}))",
           "    EOF", ""]
    optional = [x.name for x in op.inputs if x.optional]
    if optional:
        one = optional[0]
        out += [f"Each model takes the inputs of its graph, no more: `export.py` also writes, for each optional input,",
                f"a model without it (`build/{op.name}_{op.dtypes[0]}_without_{one}.onnx`, and `_legacy_without_{one}`),",
                "whose node omits that input (left out at the end, named \"\" before a present one): both exporters",
                f"trace the op called with None there. Its `run/` holds no `{one}.npy`.", ""]
    return out


REGIONS = {
    "math": math, "reference": reference, "math-tests": math_tests, "readme": readme, "sizes": sizes, "torch-kernel": torch_kernel,
    "torch-schema": torch_schema, "fake": fake, "translation": translation, "symbolic": symbolic,
    "schema": schema_module, "ort-attributes": ort_attributes, "ort-compute": ort_compute,
    "ort-shape": ort_shape, "ort-types": ort_types, "ort-create": ort_create, "ort-register": ort_register,
    "readme-size": readme_size, "readme-run": readme_run, "op-doc": op_doc,
}
# Regions a user edits: the template keeps its own math for its own op only.
USER_REGIONS = {"math", "reference", "math-tests"}
MARK = re.compile(r"<(/?)schema:([a-z-]+)>")


def render(text: str, op: Op, keep=()) -> str:
    """``text`` with each region's lines replaced by REGIONS[name](op), except
    the regions named in ``keep``."""
    result, inside = [], None
    for line in text.split("\n"):
        mark = MARK.search(line)
        if mark and not mark.group(1):
            result.append(line)
            inside = mark.group(2)
            if inside not in keep:
                result += REGIONS[inside](op)
            continue
        if mark and mark.group(1):
            inside = None
        if inside is None or inside in keep:
            result.append(line)
    return "\n".join(result)
