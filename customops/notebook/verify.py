"""Check an exported model: the ONNX checker, then ONNX Runtime against PyTorch.

    session = onnxruntime.InferenceSession(onnx_model.SerializeToString(), options)
    check(onnx_model, model, (x, offset), session=session, more_args=[(x2, offset2)])

It exports nothing and registers nothing: the export, the translation table or
symbolic functions, and the session with its custom-op libraries are the
caller's, visible where they are made.
"""

from __future__ import annotations

import numpy as np
import onnx
import torch


def _numpy(values):
    if isinstance(values, torch.Tensor):
        return [values.detach().numpy()]
    return [v.detach().numpy() for v in values]


def compare(session, model, args, rtol=1e-5, atol=1e-6) -> list[float]:
    """Runs ``args`` through ``model`` and through ``session`` (feeding the
    session's inputs in order, one per argument) and asserts equal outputs:
    integers exactly, floats within rtol/atol.  Returns the largest absolute
    difference of each output.  Raises ValueError when the session does not
    take one input per argument (an export that dropped an input, as a
    constant or unused, cannot be compared by position)."""
    args = args if isinstance(args, tuple) else (args,)
    inputs = [i.name for i in session.get_inputs()]
    if len(inputs) != len(args):
        raise ValueError(f"the session takes {len(inputs)} input(s) ({', '.join(inputs)}) but "
                         f"{len(args)} argument(s) were given: an input was dropped or added "
                         "on export, so they cannot be paired in order")
    feeds = {name: a.numpy() for name, a in zip(inputs, args)}
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
          atol=1e-6) -> None:
    """``onnx.checker.check_model(full_check=True)``, then ``compare`` on
    ``args`` and on every input tuple of ``more_args``; prints one line
    saying what matched.  ``session`` is an ``onnxruntime.InferenceSession``
    of ``onnx_model`` that the caller created, custom-op libraries and all."""
    onnx.checker.check_model(onnx_model, full_check=True)
    results = [compare(session, model, a, rtol, atol) for a in (args, *more_args)]
    # The differences themselves are not printed: their last digits depend on
    # the CPU's vector code paths, and notebooks must print the same text on
    # every machine.
    ops = sorted({f"{n.domain or 'ai.onnx'}::{n.op_type}" for n in onnx_model.graph.node})
    exact = all(d == 0 for r in results for d in r)
    match = "identical" if exact else f"equal within rtol={rtol:g}, atol={atol:g}"
    print(f"nodes {', '.join(ops)}; checker ok; ORT and torch {match} on {len(results)} "
          "input set(s)")
