"""Test helpers: single-node ONNX models built by hand, references, and the
build of an example ORT library by the command its header comment gives.

Building the ONNX node with onnx.helper (customops.builder, not an exporter)
tests the ORT kernels on their own; the exporter tests then check that the
exporters produce the same nodes.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import numpy as np

from customops import headers
from customops.builder import single_node_model  # noqa: F401  (used by the tests)

ROOT = Path(__file__).resolve().parent.parent


def build_example(source: Path, library: Path, text: str | None = None) -> None:
    """Runs the g++ command an example's header comment gives (``exports.lds``
    is csrc/ort's), with ``-Wall -Wextra -Werror``, on ``text`` instead of the
    file's own content when given."""
    words = next(line for line in source.read_text().splitlines() if re.match(r"//\s+g\+\+ ", line))[2:].split()
    if text is not None:
        source = library.with_suffix(".cc")
        source.write_text(text)
    include = str(headers.include_dir())
    command = [str(source) if word.endswith(".cc") else
               str(library) if word.endswith(".so") else
               word.replace("exports.lds", str(ROOT / "csrc/ort/exports.lds")) if "--version-script" in word else
               word.replace("$ORT_INCLUDE", include) for word in words]
    done = subprocess.run([*command, "-Wall", "-Wextra", "-Werror"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr


def torch_generator(rng):
    """A torch generator seeded from a numpy one (the test's ``rng``): torch's
    random functions take it as ``generator=``, so nothing is drawn from
    torch's global generator (tests/conftest.py fails a test that does)."""
    import torch

    return torch.Generator().manual_seed(int(rng.integers(2**63)))


def feeds(inputs: dict) -> dict:
    return {name: array for name, array in inputs.items() if array is not None}


def knn_reference(nsample, xyz, offset, new_xyz=None, new_offset=None):
    """Brute force in float64: every query against every point of its cloud,
    sorted by (distance, index); padded with -1 / inf.  Independent of the
    kernel (numpy only)."""
    if new_xyz is None:
        new_xyz, new_offset = xyz, offset
    xyz64, q64 = xyz.astype(np.float64), new_xyz.astype(np.float64)
    m = len(new_xyz)
    idx = np.full((m, nsample), -1, np.int32)
    dist = np.full((m, nsample), np.inf, np.float32)
    start, qstart = 0, 0
    for end, qend in zip(offset, new_offset):
        points = xyz64[start:end]
        for row in range(qstart, qend):
            d2 = ((points - q64[row]) ** 2).sum(axis=1)
            order = np.lexsort((np.arange(len(points)), d2))[:nsample]
            idx[row, :len(order)] = order + start
            dist[row, :len(order)] = np.sqrt(d2[order])
        start, qstart = end, qend
    return idx, dist


def ms_deform_attn_reference(value, spatial_shapes, level_start_index, sampling_locations,
                             attention_weights):
    """Multi-scale deformable attention in float64 numpy, by its definition:
    each sample is the sum over its four corner pixels (x0 + i, y0 + j) of
    (1 - |x - x0 - i|) * (1 - |y - y0 - j|) times the pixel, 0 outside the
    level, at pixel (x, y) = location * (W, H) - 0.5.  Independent of the
    kernel and of torch (grid_sample is tests/test_ms_deform_attn.py's other
    reference).  Rounded to value's dtype at the end."""
    n, _, heads, channels = value.shape
    queries = sampling_locations.shape[1]
    out = np.zeros((n, queries, heads, channels))
    batch = np.arange(n)[:, None, None, None]
    head = np.arange(heads)[None, None, :, None]
    for level, ((height, width), start) in enumerate(zip(spatial_shapes, level_start_index)):
        if height * width == 0:
            continue
        pixels = value[:, start:start + height * width].astype(np.float64)
        pixels = pixels.reshape(n, height, width, heads, channels)
        loc = sampling_locations[:, :, :, level].astype(np.float64)   # (N, Q, M, P, 2)
        x, y = loc[..., 0] * width - 0.5, loc[..., 1] * height - 0.5
        weight = attention_weights[:, :, :, level].astype(np.float64)  # (N, Q, M, P)
        for j in (0, 1):
            for i in (0, 1):
                xi, yi = np.floor(x) + i, np.floor(y) + j
                inside = (xi >= 0) & (xi < width) & (yi >= 0) & (yi < height)
                bilinear = np.where(inside, (1 - np.abs(x - xi)) * (1 - np.abs(y - yi)), 0)
                corner = pixels[batch, np.clip(yi, 0, height - 1).astype(np.int64),
                                np.clip(xi, 0, width - 1).astype(np.int64), head]
                out += ((weight * bilinear)[..., None] * corner).sum(axis=3)
    return out.reshape(n, queries, heads * channels).astype(value.dtype)


def ms_deform_attn_core_pytorch(value, value_spatial_shapes, sampling_locations,
                                attention_weights):
    """Deformable DETR's pure-PyTorch multi-scale deformable attention
    (models/ops/functions/ms_deform_attn_func.py, ms_deform_attn_core_pytorch):
    one grid_sample per level, what transformers and optimum export instead of
    the CUDA kernel.  value_spatial_shapes is a list of (H, W) ints.  The
    other reference of tests/test_ms_deform_attn.py, and the GridSample route
    of bench/."""
    import torch
    import torch.nn.functional as F

    n, _, heads, channels = value.shape
    _, queries, _, levels, points, _ = sampling_locations.shape
    value_list = value.split([h * w for h, w in value_spatial_shapes], dim=1)
    sampling_grids = 2 * sampling_locations - 1
    sampling_value_list = []
    for level, (h, w) in enumerate(value_spatial_shapes):
        # (N, H*W, M, D) -> (N*M, D, H, W)
        value_l = value_list[level].flatten(2).transpose(1, 2).reshape(n * heads, channels, h, w)
        # (N, Q, M, P, 2) -> (N*M, Q, P, 2)
        grid_l = sampling_grids[:, :, :, level].transpose(1, 2).flatten(0, 1)
        sampling_value_list.append(F.grid_sample(value_l, grid_l, mode="bilinear",
                                                 padding_mode="zeros", align_corners=False))
    # (N, Q, M, L, P) -> (N*M, 1, Q, L*P)
    weights = attention_weights.transpose(1, 2).reshape(n * heads, 1, queries, levels * points)
    output = (torch.stack(sampling_value_list, dim=-2).flatten(-2) * weights).sum(-1)
    return output.view(n, heads * channels, queries).transpose(1, 2).contiguous()


def random_clouds(rng, sizes, dims=3, duplicates=False):
    """Packed clouds of the given sizes: (xyz float32 (n, 3), offset int32)."""
    parts = []
    for size in sizes:
        points = rng.random((size, dims), dtype=np.float32)
        if duplicates and size > 1:
            # Many exact repeats: ties that only the index can break.
            points = points[rng.integers(0, max(1, size // 4), size)]
        parts.append(points)
    xyz = np.concatenate(parts) if parts else np.zeros((0, dims), np.float32)
    return np.ascontiguousarray(xyz, np.float32), np.cumsum(sizes).astype(np.int32)


def empty_name_cases(ops):
    """Single-node models whose node gives a required input or an output the
    empty name (the ONNX spelling of "omitted"), one per op and position:
    {id: (model, feeds)}.  The models are customops.check's own "omitted"
    variants of each op's base call."""
    from customops.check.hostile import omitted_models

    cases = {}
    for op in ops:
        base = op.declared(op.base.inputs)
        model = single_node_model(op.onnx_name, base, op.output_names, **op.base.attrs)
        for text, (variant, _) in omitted_models(model).items():
            kind, position, name = text.split()[:3]  # "input 1 (b) omitted", "inputs 2.. dropped"
            if kind == "inputs" or "appended" in text or (kind == "input" and op.inputs[int(position)].optional):
                continue
            present = {i.name for i in variant.graph.input}
            cases[f"{op.name}-{kind}-{name.strip('()')}"] = (
                variant, {k: v for k, v in feeds(base).items() if k in present})
    return cases


def run_kernel_driver(source, tmp_path):
    """Compiles a small C++ program against csrc/kernels/ (headers only) and
    runs it: for the kernels' pieces no op call reaches."""
    import subprocess
    from pathlib import Path

    kernels = Path(__file__).resolve().parent.parent / "csrc" / "kernels"
    program = tmp_path / Path(source).stem
    subprocess.run(["g++", "-std=c++17", "-O1", "-Wall", "-Werror", "-pthread", f"-I{kernels}",
                    str(source), "-o", str(program)], check=True)
    return subprocess.run([str(program)], capture_output=True, text=True, timeout=120)


def ort_extensions():
    """onnxruntime_extensions, imported (it imports torch when present: only in a test
    process).  Its import sets PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python in os.environ
    (its cvt module), and every process started later would inherit that (a notebook's
    kernel then runs protobuf's pure-Python code): the variable is put back."""
    import os

    before = os.environ.get("PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION")
    import onnxruntime_extensions

    if before is None:
        os.environ.pop("PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION", None)
    else:
        os.environ["PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION"] = before
    return onnxruntime_extensions

