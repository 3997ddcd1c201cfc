"""Exports my_ops::scaled_row_sum with both exporters, the number of rows
dynamic ("rows"), into build/:

    scaled_row_sum.onnx         torch.onnx.export(dynamo=True) and to_onnx.TABLE
    scaled_row_sum_legacy.onnx  torch.onnx.export(dynamo=False) and the symbolic
"""

import warnings
from pathlib import Path

import onnx
import torch

import to_onnx
from reference import EXPORTED_SCALE

BUILD = Path(__file__).resolve().parent / "build"
INPUTS, OUTPUTS = ["x", "weight"], ["sum", "argmax"]


class Model(torch.nn.Module):
    """The op alone, scale fixed: what the exporters trace."""

    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x, weight):
        return torch.ops.my_ops.scaled_row_sum(x, weight, self.scale)


def example_inputs():
    # 3 rows: not 0 or 1, which an exporter may treat as a special size.
    return torch.linspace(-1, 1, 12).reshape(3, 4), torch.tensor([1.0, -1.0, 2.0, 0.5])


def export_dynamo(path: Path) -> None:
    program = torch.onnx.export(
        Model(EXPORTED_SCALE).eval(), example_inputs(), dynamo=True, verbose=False,
        input_names=INPUTS, output_names=OUTPUTS, custom_translation_table=to_onnx.TABLE,
        dynamic_shapes=({0: "rows"}, None))
    onnx.save(program.model_proto, path)


def export_legacy(path: Path) -> None:
    to_onnx.register_symbolic()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "dynamo=False is deprecated": we know, it is the legacy route
        torch.onnx.export(
            Model(EXPORTED_SCALE).eval(), example_inputs(), str(path), dynamo=False,
            input_names=INPUTS, output_names=OUTPUTS,
            custom_opsets={"my_ops": to_onnx.DOMAIN_VERSION},
            dynamic_axes={"x": {0: "rows"}, "sum": {0: "rows"}, "argmax": {0: "rows"}})


if __name__ == "__main__":
    BUILD.mkdir(exist_ok=True)
    export_dynamo(BUILD / "scaled_row_sum.onnx")
    export_legacy(BUILD / "scaled_row_sum_legacy.onnx")
    print("wrote", BUILD / "scaled_row_sum.onnx", "and", BUILD / "scaled_row_sum_legacy.onnx")
