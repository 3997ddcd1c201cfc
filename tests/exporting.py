"""Export plumbing for the tests: both exporters, with everything the custom
operators need passed explicitly here (the notebooks write the same out in
their cells).  The TorchScript exporter gets customops.symbolic's functions
registered; the torch.export exporter gets customops.translations.TABLE."""

from __future__ import annotations

import io
import warnings

import numpy as np
import onnx
import onnx.checker
import torch

import customops.ops  # noqa: F401  (defines torch.ops.customops.*)
from customops import ort, symbolic, translations
from customops.notebook.native import native_output
from customops.notebook.verify import compare

OPSET = 18


def export(model, args, *, dynamo: bool, opset_version: int = OPSET, **kwargs) -> onnx.ModelProto:
    """torch.onnx.export to memory, quietly (warnings, progress lines and the
    exporters' native output are the notebooks' subject, not the tests')."""
    args = args if isinstance(args, tuple) else (args,)
    if dynamo:
        table = {**translations.TABLE, **kwargs.pop("custom_translation_table", {})}
        kwargs.update(custom_translation_table=table, verbose=False)
    else:
        symbolic.register()
        kwargs["custom_opsets"] = {ort.DOMAIN: ort.OPSET_VERSION, **kwargs.get("custom_opsets", {})}
    with warnings.catch_warnings(), native_output():
        warnings.simplefilter("ignore")
        if dynamo:
            return torch.onnx.export(model, args, dynamo=True, opset_version=opset_version,
                                     **kwargs).model_proto
        buffer = io.BytesIO()
        torch.onnx.export(model, args, buffer, dynamo=False, opset_version=opset_version,
                          **kwargs)
        return onnx.load_from_string(buffer.getvalue())


def verify(model, args, *, dynamo: bool, more_args=(), rtol=1e-5, atol=1e-6, reference=None,
           **export_kwargs) -> onnx.ModelProto:
    """Export, run the full ONNX checker, and compare ORT (with our library)
    with torch on ``args`` and every input tuple of ``more_args``.  ORT and
    torch run the same kernel, so their agreement proves the export, not the
    kernel: given ``reference`` (numpy arrays -> expected outputs, computed
    without our kernels), ORT's outputs are compared with it too."""
    onnx_model = export(model, args, dynamo=dynamo, **export_kwargs)
    onnx.checker.check_model(onnx_model, full_check=True)
    session = ort.session(onnx_model)
    for inputs in (args, *more_args):
        compare(session, model, inputs, rtol, atol)
        if reference is not None:
            arrays = [a.numpy() for a in inputs]
            got = session.run(None, {i.name: a for i, a in zip(session.get_inputs(), arrays)})
            expected = reference(*arrays)
            assert len(got) == len(expected)
            for g, e in zip(got, expected):
                np.testing.assert_allclose(g, e, rtol=rtol, atol=atol)
    return onnx_model
