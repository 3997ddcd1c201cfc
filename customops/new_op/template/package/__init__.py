"""my_ops, as installed from the wheel of `make wheel`:

    import my_ops                 # registers torch.ops.my_ops.scaled_row_sum (op.py)
    my_ops.get_library_path()     # the ORT library, for SessionOptions.register_custom_ops_library
"""

from pathlib import Path

from . import op  # noqa: F401  loads the torch library, registers the fake kernel


def get_library_path() -> str:
    return str(Path(__file__).resolve().parent / "build" / "libscaled_row_sum_ort.so")
