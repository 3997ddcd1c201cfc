"""Exports my_ops::scaled_row_sum with both exporters into build/, for each
dtype of schema.DTYPES, with every input and without each optional input
(schema.WITHOUT), its named sizes dynamic and named as in --shapes:

    scaled_row_sum_<dtype>.onnx                       torch.onnx.export(dynamo=True) and to_onnx.TABLE
    scaled_row_sum_<dtype>_legacy.onnx                torch.onnx.export(dynamo=False) and the symbolic
    scaled_row_sum_<dtype>[_legacy]_without_<name>.onnx  the same without the optional input <name>
"""

import sys
import warnings
from pathlib import Path

import numpy as np
import onnx
import torch

import to_onnx
from samples import sample
from schema import DTYPES, EXPORTED, INPUTS, NAME, NAMESPACE, OUTPUTS, WITHOUT, model_file

BUILD = Path(__file__).resolve().parent / "build"
OP = getattr(getattr(torch.ops, NAMESPACE), NAME)


class Model(torch.nn.Module):
    """The op alone, its attributes fixed to EXPORTED, the input ``without``
    absent (None): what the exporters trace."""

    def __init__(self, without=""):
        super().__init__()
        self.without = without

    def forward(self, *inputs):
        given = iter(inputs)
        return OP(*(None if name == self.without else next(given) for name in INPUTS), **EXPORTED)


def example_inputs(dtype, without=""):
    # Sizes of 3 or more, not 0 or 1, which an exporter may treat as special;
    # group ids with every group present (the legacy exporter runs the kernel).
    arrays = sample(dtype, np.random.default_rng(0), smallest=3, ids="dense")
    return {name: torch.from_numpy(array) for name, array in arrays.items() if name != without}


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


def export_dynamo(dtype, without, path: Path) -> None:
    inputs = example_inputs(dtype, without)
    axes = dynamic_axes({name: INPUTS[name] for name in inputs})
    # A size named on two inputs (cols) is one size: the exporter warns that it keeps one of the names.
    warnings.filterwarnings("ignore", "# The axis name: .* shares the same shape constraints")
    program = torch.onnx.export(
        Model(without).eval(), tuple(inputs.values()), dynamo=True, verbose=False,
        input_names=list(inputs), output_names=list(OUTPUTS), custom_translation_table=to_onnx.TABLE,
        dynamic_shapes={"inputs": tuple(axes[name] or None for name in inputs)})  # forward(*inputs)
    model = program.model_proto
    declare_output_sizes(model)
    onnx.save(model, path)


def export_legacy(dtype, without, path: Path) -> None:
    inputs = example_inputs(dtype, without)
    to_onnx.register_symbolic()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "dynamo=False is deprecated": we know, it is the legacy route
        torch.onnx.export(
            Model(without).eval(), tuple(inputs.values()), str(path), dynamo=False,
            input_names=list(inputs), output_names=list(OUTPUTS),
            custom_opsets={NAMESPACE: to_onnx.DOMAIN_VERSION},
            dynamic_axes=dynamic_axes({name: INPUTS[name] for name in inputs} | OUTPUTS))
    model = onnx.load(path)
    declare_output_sizes(model)
    onnx.save(model, path)


if __name__ == "__main__":
    BUILD.mkdir(exist_ok=True)
    written = []
    for dtype in DTYPES:
        for without in WITHOUT:
            for route, export in (("dynamo", export_dynamo), ("legacy", export_legacy)):
                written.append(model_file(dtype, route, without))
                export(dtype, without, BUILD / written[-1])
    print("wrote", *written, "into", BUILD, file=sys.stderr)
