"""Export -> check -> run in ONNX Runtime -> compare with PyTorch, in one call.

    from customops.verify import verify
    onnx_model = verify(model, (x, offset), dynamo=False)   # TorchScript exporter
    onnx_model = verify(model, (x, offset), dynamo=True)    # torch.export exporter

Both exporters get what they need for the custom operators: the TorchScript
exporter the symbolic functions of ``customops.symbolic``, the new one the
translation table of ``customops.translations``.
"""

from __future__ import annotations

import contextlib
import io
import warnings

import numpy as np
import onnx
import torch

from . import ort, symbolic, translations
from .native import native_output

DEFAULT_OPSET = 18


def export(model, args, *, dynamo: bool, opset_version: int = DEFAULT_OPSET,
           quiet: bool = True, **kwargs) -> onnx.ModelProto:
    """torch.onnx.export to memory; returns the ONNX model.

    kwargs go to torch.onnx.export (input_names, output_names, dynamic_axes
    or dynamic_shapes, custom_opsets, ...).  ``quiet`` hides the exporters'
    deprecation warnings, progress lines and what their C++ side prints,
    which the notebooks discuss once instead of on every call.
    """
    args = args if isinstance(args, tuple) else (args,)
    if dynamo:
        table = {**translations.TABLE, **kwargs.pop("custom_translation_table", {})}
        kwargs.update(custom_translation_table=table, verbose=not quiet)
    else:
        symbolic.register()
    with warnings.catch_warnings(), (native_output() if quiet else contextlib.nullcontext()):
        if quiet:
            warnings.simplefilter("ignore")
        if dynamo:
            program = torch.onnx.export(model, args, dynamo=True,
                                        opset_version=opset_version, **kwargs)
            return program.model_proto
        buffer = io.BytesIO()
        torch.onnx.export(model, args, buffer, dynamo=False, opset_version=opset_version,
                          **kwargs)
        return onnx.load_from_string(buffer.getvalue())


def _numpy(values):
    if isinstance(values, torch.Tensor):
        return [values.detach().numpy()]
    return [v.detach().numpy() for v in values]


def compare(onnx_model: onnx.ModelProto, model, args, rtol=1e-5, atol=1e-6, session=None):
    """Runs ``args`` through torch and through ORT (with the custom-op
    library) and asserts equal outputs: integers exactly, floats within
    rtol/atol.  Returns the largest absolute difference of each output."""
    args = args if isinstance(args, tuple) else (args,)
    session = session or ort.session(onnx_model)
    feeds = {i.name: a.numpy() for i, a in zip(session.get_inputs(), args)}
    got = session.run(None, feeds)
    with torch.no_grad():
        expected = _numpy(model(*args))
    assert len(got) == len(expected), f"ORT gave {len(got)} outputs, torch {len(expected)}"
    diffs = []
    for name, g, e in zip((o.name for o in session.get_outputs()), got, expected):
        assert g.shape == e.shape and g.dtype == e.dtype, (
            f"{name}: ORT {g.dtype}{list(g.shape)} vs torch {e.dtype}{list(e.shape)}")
        if np.issubdtype(e.dtype, np.integer):
            np.testing.assert_array_equal(g, e, err_msg=name)
        else:
            np.testing.assert_allclose(g, e, rtol=rtol, atol=atol, err_msg=name)
        finite = np.isfinite(e)
        diff = np.abs(g[finite].astype(np.float64) - e[finite])
        diffs.append(float(diff.max()) if diff.size else 0.0)
    return diffs


def check(onnx_model: onnx.ModelProto, model, args, *, session, more_args=(), rtol=1e-5,
          atol=1e-6) -> list[list[float]]:
    """``onnx.checker.check_model(full_check=True)``, then runs ``session``
    (an ``onnxruntime.InferenceSession`` of ``onnx_model`` that the caller
    created, custom-op libraries and all) and ``model`` on ``args`` and on
    every input tuple of ``more_args``, asserts equal outputs (integers
    exactly, floats within rtol/atol) and prints one line saying so.  It
    exports nothing and registers nothing."""
    onnx.checker.check_model(onnx_model, full_check=True)
    results = [compare(onnx_model, model, a, rtol, atol, session) for a in (args, *more_args)]
    # The differences themselves are not printed: their last digits depend on
    # the CPU's vector code paths, and notebooks must print the same text on
    # every machine.
    ops = sorted({f"{n.domain or 'ai.onnx'}::{n.op_type}" for n in onnx_model.graph.node})
    exact = all(d == 0 for r in results for d in r)
    match = "identical" if exact else f"equal within rtol={rtol:g}, atol={atol:g}"
    print(f"nodes {', '.join(ops)}; checker ok; ORT and torch {match} on {len(results)} "
          "input set(s)")
    return results


def verify(model, args, *, dynamo: bool, more_args=(), rtol=1e-5, atol=1e-6,
           verbose=True, **export_kwargs) -> onnx.ModelProto:
    """Export, ``onnx.checker.check_model(full_check=True)``, then compare
    ORT with torch on ``args`` and on every input tuple in ``more_args``
    (export with dynamic shapes for those of other sizes)."""
    onnx_model = export(model, args, dynamo=dynamo, **export_kwargs)
    onnx.checker.check_model(onnx_model, full_check=True)
    session = ort.session(onnx_model)
    results = [compare(onnx_model, model, a, rtol, atol, session) for a in (args, *more_args)]
    if verbose:
        # The differences themselves are not printed: their last digits
        # depend on the CPU's vector code paths, and notebooks must print the
        # same text on every machine.
        exporter = "torch.export (dynamo=True)" if dynamo else "TorchScript (dynamo=False)"
        ops = sorted({f"{n.domain or 'ai.onnx'}::{n.op_type}" for n in onnx_model.graph.node})
        exact = all(d == 0 for r in results for d in r)
        match = "identical" if exact else f"equal within rtol={rtol:g}, atol={atol:g}"
        print(f"{exporter}: nodes {', '.join(ops)}; checker ok; ORT and torch {match} "
              f"on {len(results)} input set(s)")
    return onnx_model
