"""Exports a model that uses custom::knnquery, and inputs for it, for run_model.

    python examples/cpp/export_knn.py DIR
writes DIR/knn_query.onnx, DIR/xyz.npy and DIR/offset.npy (two point clouds).
"""

import sys
from pathlib import Path

import numpy as np
import torch

import customops
import customops.translations


class Knn(torch.nn.Module):
    def forward(self, xyz, offset):
        return customops.knn_query(8, xyz, offset)


folder = Path(sys.argv[1] if len(sys.argv) > 1 else "build/knn")
folder.mkdir(parents=True, exist_ok=True)
rng = np.random.default_rng(0)
xyz = rng.random((1000, 3), dtype=np.float32)
offset = np.array([600, 1000], np.int32)  # clouds of 600 and 400 points
torch.onnx.export(
    Knn(), (torch.from_numpy(xyz), torch.from_numpy(offset)), folder / "knn_query.onnx",
    dynamo=True, input_names=["xyz", "offset"], output_names=["idx", "dist"],
    dynamic_shapes=({0: "n"}, {0: "b"}),
    # how the exporter writes customops::knn_query as ONNX: custom::knnquery
    custom_translation_table=customops.translations.TABLE,
)
np.save(folder / "xyz.npy", xyz)
np.save(folder / "offset.npy", offset)
print(f"wrote {folder}/knn_query.onnx, xyz.npy, offset.npy")
