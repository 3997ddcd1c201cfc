"""Run models that use the custom domain in ONNX Runtime, without torch.

    from customops.ort import session
    sess = session("model.onnx")            # path, bytes or onnx.ModelProto
    idx, dist = sess.run(None, {"xyz": xyz, "offset": offset})

The only compiled file needed is the one ``library_path()`` returns.
"""

from __future__ import annotations

import os
from pathlib import Path

import onnxruntime

DOMAIN = "custom"
OPSET_VERSION = 1
LIBRARY_NAME = "libcustomops_ort.so"


def library_path() -> str:
    """Absolute path of the custom-op library built from csrc/ort."""
    path = Path(__file__).with_name(LIBRARY_NAME)
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} is missing: build the package first (`make lab`, `make test`, or "
            "`pip install --no-build-isolation -e .`)"
        )
    return str(path)


_REGISTERED = "customops.library_registered"


def session_options(options: onnxruntime.SessionOptions | None = None):
    """SessionOptions (new, or the ones given) with the library registered.

    Registering twice into one SessionOptions would make session creation
    fail ("Domain already set in registry"), so the options remember it in a
    config entry of their own."""
    options = options or onnxruntime.SessionOptions()
    try:
        options.get_session_config_entry(_REGISTERED)
    except RuntimeError:  # not registered yet
        options.register_custom_ops_library(library_path())
        options.add_session_config_entry(_REGISTERED, "1")
    return options


def session(model, sess_options=None, providers=("CPUExecutionProvider",), **kwargs):
    """An InferenceSession that can run the custom domain's ops.

    ``model`` is a path, the serialized bytes, or an ``onnx.ModelProto``;
    ``sess_options``, ``providers`` and any other keyword go to
    ``onnxruntime.InferenceSession`` unchanged.
    """
    if isinstance(model, (str, os.PathLike)):
        model = os.fspath(model)
    elif not isinstance(model, bytes):
        model = model.SerializeToString()  # onnx.ModelProto; avoids importing onnx
    return onnxruntime.InferenceSession(
        model, sess_options=session_options(sess_options), providers=list(providers), **kwargs
    )
