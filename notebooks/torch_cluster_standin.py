"""A stand-in for torch_cluster's grid operator (seed 002), for notebook 04
when the real package is not installed.

The real one is `make torch-cluster`: PyPI has only the source of
torch-cluster 1.6.3, which compiles against the installed torch (12+ minutes
on 2 cores).  This module registers ``torch_cluster::grid`` the way that
package does, so that the notebook tells the same story on either:

* torch_cluster registers a C++ function with
  ``torch::RegisterOperators().op("torch_cluster::grid", &grid)`` (csrc/grid.cpp).
  The schema is inferred from the C++ signature, which has no argument names:
  they are ``_0``..``_3`` (and the result ``_0``), and the alias analysis is
  CONSERVATIVE; copied here.
* That registration puts the kernel at CompositeImplicitAutograd, for every
  device: no CPU kernel, no fake kernel (``register_fake`` refuses such an op),
  and torch.export's decompositions trace through the kernel.  Same here.
* The kernel is grid_cpu (csrc/cpu/grid_cpu.cpp) op for op.  C++ reads sizes as
  ``int64_t``, which turns a symbolic size into a constant while torch.export
  traces it; the Python kernel does that with ``int()``.

Where it differs from the real op: the kernel is Python; a wrong ``size`` gives
torch's ``Input mismatch`` check instead of the C++ ``INTERNAL ASSERT FAILED ...
please report a bug to PyTorch. Input mismatch``; the dispatcher records this
file instead of "registered by RegisterOperators".
tests/test_torch_cluster.py checks both sides of this list against the real op.

Do not import it beside the real torch_cluster: both define the same operator.
"""

import torch

if hasattr(torch.ops.torch_cluster, "grid"):
    raise ImportError("torch_cluster::grid is already registered (the real torch_cluster is loaded): "
                      "use it, not the stand-in")

_lib = torch.library.Library("torch_cluster", "DEF")
_lib.define("grid(Tensor _0, Tensor _1, Tensor? _2, Tensor? _3) -> Tensor _0", alias_analysis="CONSERVATIVE")


def _grid(pos, size, optional_start, optional_end):
    pos = pos.view(int(pos.size(0)), -1)
    torch._check(size.numel() == pos.size(1), lambda: "Input mismatch")
    if optional_start is not None:   # (grid_cpu checks start twice and never end's length)
        torch._check(optional_start.numel() == pos.size(1), lambda: "Input mismatch")
    start = pos.min(0).values if optional_start is None else optional_start
    end = pos.max(0).values if optional_end is None else optional_end
    pos = pos - start.unsqueeze(0)
    num_voxels = ((end - start) / size).long() + 1
    num_voxels = torch.cat([num_voxels.new_ones(1), num_voxels.cumprod(0)]).narrow(0, 0, size.size(0))
    return ((pos / size.view(1, -1)).long() * num_voxels.view(1, -1)).sum(1)


_lib.impl("grid", _grid, "CompositeImplicitAutograd")


def grid_cluster(pos, size, start=None, end=None):
    """torch_cluster.grid_cluster: voxel index (int64, one per point)."""
    return torch.ops.torch_cluster.grid(pos, size, start, end)
