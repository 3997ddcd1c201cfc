"""geo: the op sq_dist for PyTorch and for ONNX Runtime, in one wheel.

    import geo                      # registers torch.ops.geo.sq_dist (loads geo/_C*.so)
    geo.get_library_path()          # the ORT library, for register_custom_ops_library

The torch op is built on the LibTorch stable ABI (targeting torch 2.10), so the
one file loads in torch 2.10 and later; the ORT library asks the runtime for its
API version, so it loads in onnxruntime 1.24 and later.  Neither links the other.
"""

from pathlib import Path

import torch

from . import _C  # noqa: F401  loading it runs STABLE_TORCH_LIBRARY's registrations

__all__ = ["get_library_path", "sq_dist"]


def get_library_path() -> str:
    """The ONNX Runtime custom-op library of this wheel (domain "geo")."""
    return str(Path(__file__).with_name("libgeo_ort.so"))


@torch.library.register_fake("geo::sq_dist")
def _(a, b):
    torch._check(a.shape == b.shape and a.dim() == 2,
                 lambda: "geo::sq_dist: a and b must be (n, d) tensors of one shape")
    return a.new_empty(a.shape[:1])


def sq_dist(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Squared distance of each row of a to the same row of b: (n, d), (n, d) -> (n,)."""
    return torch.ops.geo.sq_dist.default(a, b)
