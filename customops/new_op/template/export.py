"""Exports my_ops::scaled_row_sum with both exporters into build/, for each
dtype of schema.DTYPES, its named sizes dynamic and named as in --shapes:

    scaled_row_sum_<dtype>.onnx         torch.onnx.export(dynamo=True) and to_onnx.TABLE
    scaled_row_sum_<dtype>_legacy.onnx  torch.onnx.export(dynamo=False) and the symbolic
"""

import sys
import warnings
from pathlib import Path

import numpy as np
import onnx
import torch

import to_onnx
from samples import sample
from schema import DTYPES, EXPORTED, INPUTS, NAME, NAMESPACE, OUTPUTS

BUILD = Path(__file__).resolve().parent / "build"
OP = getattr(getattr(torch.ops, NAMESPACE), NAME)
ARGUMENTS = list(INPUTS) + list(EXPORTED)  # the schema's order: inputs, then attributes


class Model(torch.nn.Module):
    """The op alone, its attributes fixed to EXPORTED: what the exporters trace."""

    def forward(self, *inputs):
        return OP(*inputs, **EXPORTED)


def example_inputs(dtype):
    # Every optional input present; sizes of 3 or more, not 0 or 1, which an
    # exporter may treat as special.
    arrays = sample(dtype, np.random.default_rng(0), with_optional=True, smallest=3)
    return tuple(torch.from_numpy(arrays[name]) for name in INPUTS)


def dynamic_axes(tensors):
    """{name: {axis: size name}} for each named size of each tensor."""
    return {name: {axis: d for axis, d in enumerate(dims) if isinstance(d, str)} for name, (_, dims) in tensors.items()}


def declare_output_sizes(model):
    """Each graph output's sizes as --shapes declares them.  torch.export calls
    a size only the data give u0, u1, ...: it is renamed (E) wherever it
    appears.  The legacy exporter, given dynamic_axes, names a static size of
    a custom op's output (sum_dim_0): it gets its number back."""
    renames = {}
    for output in model.graph.output:
        for dim, wanted in zip(output.type.tensor_type.shape.dim, OUTPUTS[output.name][1]):
            if isinstance(wanted, int):
                dim.dim_value = wanted
            elif dim.HasField("dim_param") and dim.dim_param != wanted:
                renames[dim.dim_param] = wanted
    for value in [*model.graph.output, *model.graph.value_info]:
        for dim in value.type.tensor_type.shape.dim:
            if dim.HasField("dim_param") and dim.dim_param in renames:
                dim.dim_param = renames[dim.dim_param]


def export_dynamo(dtype, path: Path) -> None:
    axes = dynamic_axes(INPUTS)
    # A size named on two inputs (cols) is one size: the exporter warns that it keeps one of the names.
    warnings.filterwarnings("ignore", "# The axis name: .* shares the same shape constraints")
    program = torch.onnx.export(
        Model().eval(), example_inputs(dtype), dynamo=True, verbose=False,
        input_names=list(INPUTS), output_names=list(OUTPUTS), custom_translation_table=to_onnx.TABLE,
        dynamic_shapes={"inputs": tuple(axes[name] or None for name in INPUTS)})  # forward(*inputs)
    model = program.model_proto
    declare_output_sizes(model)
    onnx.save(model, path)


def export_legacy(dtype, path: Path) -> None:
    to_onnx.register_symbolic()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "dynamo=False is deprecated": we know, it is the legacy route
        torch.onnx.export(
            Model().eval(), example_inputs(dtype), str(path), dynamo=False,
            input_names=list(INPUTS), output_names=list(OUTPUTS),
            custom_opsets={NAMESPACE: to_onnx.DOMAIN_VERSION},
            dynamic_axes=dynamic_axes({**INPUTS, **OUTPUTS}))
    model = onnx.load(path)
    declare_output_sizes(model)
    onnx.save(model, path)


def model_path(dtype, route):
    return BUILD / f"{NAME}_{dtype}{'_legacy' if route == 'legacy' else ''}.onnx"


if __name__ == "__main__":
    BUILD.mkdir(exist_ok=True)
    for dtype in DTYPES:
        export_dynamo(dtype, model_path(dtype, "dynamo"))
        export_legacy(dtype, model_path(dtype, "legacy"))
    print("wrote", *(model_path(d, r).name for d in DTYPES for r in ("dynamo", "legacy")), "into", BUILD,
          file=sys.stderr)
