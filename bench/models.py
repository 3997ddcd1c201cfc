"""Single-node ONNX models built with onnx.helper, and ORT sessions for them."""

from __future__ import annotations

import numpy as np
import onnxruntime
from onnx import TensorProto, helper

from customops.builder import single_node_model


def single_node(op_type: str, inputs: dict, outputs: list[str], domain: str = "custom",
                extra_nodes=(), **attrs):
    """A single-node model whose graph inputs have the examples' exact shapes."""
    return single_node_model(op_type, inputs, outputs, domain, static_shapes=True,
                             extra_nodes=extra_nodes, **attrs)


def mul_add_graph(a: np.ndarray, b: np.ndarray):
    """c = a * 2.0 + b from standard ops: Constant, Mul, Add."""
    two = helper.make_node("Constant", [], ["two"],
                           value=helper.make_tensor("two", TensorProto.FLOAT, [], [2.0]))
    mul = helper.make_node("Mul", ["a", "two"], ["twice_a"])
    model = single_node("Add", {"twice_a": ..., "b": b}, ["c"], domain="",
                        extra_nodes=[two, mul])
    model.graph.input.insert(0, helper.make_tensor_value_info("a", TensorProto.FLOAT,
                                                              list(a.shape)))
    return model


def session(model, threads: int, custom: bool = True) -> onnxruntime.InferenceSession:
    """A CPU session with ``threads`` intra-op threads (one of them the
    caller's), with our custom-op library registered when ``custom``.

    Spinning is off: by default ORT's pool threads spin for a while after
    each run, waiting for more work.  Sessions that take turns (as the
    interleaved rounds do) would then have the idle session's threads spin
    on the cores the running one needs."""
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if custom:
        from customops.ort import session as custom_session

        return custom_session(model, sess_options=options)
    return onnxruntime.InferenceSession(model.SerializeToString(), sess_options=options,
                                        providers=["CPUExecutionProvider"])


def runner(model, threads: int, custom: bool = True, preallocate: bool = False):
    """call(inputs) -> session outputs; feeds the graph inputs by name from
    the inputs dict (which may hold more arrays than the graph needs).

    With ``preallocate`` the outputs go into arrays made once (IOBinding),
    so a call times the kernel, not the allocation of its output and the
    page faults of first writing it.  Use it for both sides of a ratio or
    for neither."""
    sess = session(model, threads, custom)
    names = [i.name for i in sess.get_inputs()]
    if not preallocate:
        return lambda inputs: sess.run(None, {name: inputs[name] for name in names})

    binding, outputs = sess.io_binding(), None

    def call(inputs):
        nonlocal outputs
        feeds = {name: inputs[name] for name in names}
        if outputs is None:  # shapes from a first, untimed-by-design run
            outputs = [np.empty_like(o) for o in sess.run(None, feeds)]
            for meta, array in zip(sess.get_outputs(), outputs):
                binding.bind_output(meta.name, "cpu", 0, array.dtype.type, array.shape,
                                    array.ctypes.data)
        for name, array in feeds.items():
            binding.bind_cpu_input(name, array)
        sess.run_with_iobinding(binding)
        return outputs

    return call
