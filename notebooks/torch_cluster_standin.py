"""A stand-in for the third-party package torch_cluster, for notebook 04.

torch_cluster (PyG) is not installable for the pinned torch: PyPI has only its
source distribution, which needs a C++/CUDA build against the installed torch,
and PyG's prebuilt wheels live on a server of their own.  This module defines
the one operator the course needs the way torch_cluster does: a schema
``torch_cluster::grid`` with two optional trailing tensors, a CPU kernel, and
nothing for torch.export (no fake kernel) or for ONNX.  The notebook treats it
as a package it cannot edit.  Do not import it beside the real torch_cluster:
both define the same operator name.

Semantics follow torch_cluster's ``grid_cpu``: the voxel index of each point
in a grid of cell ``size`` laid from ``start`` (default: the per-dimension
minimum of ``pos``) to ``end`` (default: the maximum).
"""

import torch

_lib = torch.library.Library("torch_cluster", "DEF")
_lib.define("grid(Tensor pos, Tensor size, Tensor? optional_start, Tensor? optional_end) -> Tensor")


def _grid_cpu(pos, size, start, end):
    pos = pos.view(pos.size(0), -1)
    start = pos.min(0).values if start is None else start
    end = pos.max(0).values if end is None else end
    voxels = ((end - start) / size).long() + 1
    strides = torch.cat([torch.ones(1, dtype=torch.long), voxels.cumprod(0)[:-1]])
    return (((pos - start) / size).long() * strides).sum(1)


_lib.impl("grid", _grid_cpu, "CPU")


def grid_cluster(pos, size, start=None, end=None):
    """torch_cluster.grid_cluster: voxel index (int64, one per point)."""
    return torch.ops.torch_cluster.grid(pos, size, start, end)
