"""my_ops::scaled_row_sum in PyTorch: importing this module loads the compiled
op (built by `make`) and registers its fake kernel.  Then call

    total, argmax = torch.ops.my_ops.scaled_row_sum(x, weight, scale)
"""

from pathlib import Path

import torch

LIBRARY = Path(__file__).resolve().parent / "build" / "libscaled_row_sum_torch.so"
if not LIBRARY.is_file():
    raise ImportError(f"{LIBRARY} is missing: run `make` first")
# Runs the library's TORCH_LIBRARY block: the op exists from here on.  Load it
# once per process: a second, rebuilt copy would register my_ops again and
# abort the process, so restart Python after each rebuild.
torch.ops.load_library(LIBRARY)


@torch.library.register_fake("my_ops::scaled_row_sum")
def _(x, weight, scale):
    # torch.export runs the op on fake tensors (shapes, no data).  State the
    # size the kernel requires, so export refuses what the kernel would.
    if weight is not None:
        torch._check(weight.shape[0] == x.shape[1], lambda: "scaled_row_sum: weight must have one value per column of x")
    rows = x.shape[0]
    return x.new_empty((rows,)), x.new_empty((rows,), dtype=torch.int64)
