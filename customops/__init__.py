"""customops: the operators of the course, in PyTorch and in ONNX Runtime.

Importing this package is cheap and never imports torch, so a deployment that
has only onnxruntime can use ``customops.ort``.  The PyTorch side loads on
first use of one of its names::

    import customops
    customops.my_add(a, b)              # torch.ops.customops.my_add
    customops.knn_query(16, xyz, offset)
    from customops.ort import session   # torch-free
"""

import importlib

# name -> submodule that defines it; loaded (with torch) on first access
_LAZY = {
    "my_add": "ops",
    "knn_query": "ops",
    "KNNQuery": "ops",
    "deform_conv2d": "ops",
    "DeformConv2d": "ops",
    "ms_deform_attn": "ops",
    "MSDeformAttnFunction": "ops",
}

# submodules, importable as attributes: customops.ort, customops.notebook, ...
_SUBMODULES = {"builder", "check", "doctor", "headers", "new_op", "notebook", "ops", "ort", "symbolic",
               "translations"}

__all__ = sorted(_LAZY)


def __getattr__(name):
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
