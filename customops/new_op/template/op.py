# <schema:op-doc>
"""my_ops::scaled_row_sum in PyTorch: importing this module loads the compiled
op (built by `make`) and registers its fake kernel.  Then call it with the
arguments of its schema (schema.SCHEMA), e.g.

    sum, argmax = torch.ops.my_ops.scaled_row_sum(x, weight, scale)

with None for an absent weight.
"""
# </schema:op-doc>

from pathlib import Path

import torch

LIBRARY = Path(__file__).resolve().parent / "build" / "libscaled_row_sum_torch.so"
if not LIBRARY.is_file():
    raise ImportError(f"{LIBRARY} is missing: run `make` first")
# Runs the library's TORCH_LIBRARY block: the op exists from here on.  Load it
# once per process: a second, rebuilt copy would register my_ops again and
# abort the process, so restart Python after each rebuild.
torch.ops.load_library(LIBRARY)


# <schema:fake>
@torch.library.register_fake("my_ops::scaled_row_sum")
def _(x, weight, scale):
    # torch.export runs the op on fake tensors (shapes, no data): state the sizes
    # the kernel requires, so export refuses what the kernel would.
    torch._check(x.dim() == 2, lambda: "scaled_row_sum: x must have rank 2")
    if weight is not None:
        torch._check(weight.dim() == 1, lambda: "scaled_row_sum: weight must have rank 1")
        torch._check(weight.shape[0] == x.shape[1], lambda: "scaled_row_sum: weight must have cols = x.shape[1] at dimension 0")
    rows = x.shape[0]
    return x.new_empty((rows,)), x.new_empty((rows,), dtype=torch.int64)
# </schema:fake>
