"""Bad input never reaches memory: every op, in both bindings, refuses it with
a message that names the argument and what was expected.

A case lists the op's inputs (numpy arrays, None for an absent optional
input), its attributes, and the regular expression the message must match.
Each case runs

* through the PyTorch binding (``torch.ops.customops.<op>``), which must raise
  RuntimeError (TORCH_CHECK), and
* through ONNX Runtime, as a single-node model run by a session with the
  custom-op library, which must raise InvalidArgument
  (ORT_INVALID_ARGUMENT) while the process lives on,

unless the case is marked for one binding only: dtype and layout are checked
by the PyTorch binding; in ONNX Runtime the runtime itself checks the dtypes
(the library declares them), with its own message, tested here too.  The
op-specific cases are the ``bad`` lists of tests/optable.py; the dtype cases
are derived here from each input's dtypes in that table.  ``test_summary``
prints how many cases each op has per binding.

Empty inputs (n = 0, m = 0, N = 0) are not errors: they give empty outputs
of the right shape (``test_empty_inputs_*``).
"""

from __future__ import annotations

import re

import numpy as np
import onnxruntime
import pytest
import torch
from onnxruntime.capi.onnxruntime_pybind11_state import (
    Fail,
    InvalidArgument,
    InvalidGraph,
    RuntimeException,
)

import customops.ops  # noqa: F401  (registers torch.ops.customops.*)
from customops.ort import session
from helpers import empty_name_cases, feeds, knn_reference, single_node_model
from optable import DCN, DCN_ATTRS, F16, F32, F64, I32, I64, KNN, OPS, Bad, tensors

f32 = lambda *shape: np.zeros(shape, np.float32)  # noqa: E731
i32 = lambda *values: np.array(values, np.int32)  # noqa: E731

TORCH, ORT = ("torch",), ("ort",)
ORT_DTYPE = r"Unexpected input data type\. Actual: \(tensor\({}\)\) , expected: \(tensor\({}\)\)"
C10 = {F32: "Float", F64: "Double", F16: "Half", I32: "Int", I64: "Long"}
ONNX = {F32: "float", F64: "double", F16: "float16", I32: "int32", I64: "int64"}


def _names(dtypes):
    names = [C10[d] for d in dtypes]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


def dtype_cases(op):
    """The dtype errors of every input, derived from the table: a dtype
    PyTorch refuses, one ORT refuses, and one that differs from the input it
    must match."""
    cases = []
    for spec in op.inputs:
        base = op.base.inputs[spec.name]
        torch_wrong = next(d for d in (I32, F32) if d not in spec.torch)
        cases.append(Bad(f"{spec.name}-{torch_wrong}",
                         {**op.base.inputs, spec.name: base.astype(torch_wrong)}, op.base.attrs,
                         rf"^{op.name}: {spec.name} must be {_names(spec.torch)}, "
                         rf"got {C10[torch_wrong]}$", TORCH))
        ort_wrong = next(d for d in (I64, F64, I32) if d not in spec.onnx)
        cases.append(Bad(f"{spec.name}-{ort_wrong}-ort",
                         {**op.base.inputs, spec.name: base.astype(ort_wrong)}, op.base.attrs,
                         ORT_DTYPE.format(ONNX[ort_wrong], ONNX[spec.onnx[0]]), ORT))
        if spec.same_as:
            other = next(d for d in spec.torch if d != base.dtype)
            cases.append(Bad(f"{spec.name}-{other}-unlike-{spec.same_as}",
                             {**op.base.inputs, spec.name: base.astype(other)}, op.base.attrs,
                             rf"^{op.name}: {spec.name} must have the dtype of {spec.same_as}, "
                             rf"{C10[base.dtype]}, got {C10[other]}$", TORCH))
    return cases


def all_cases(op):
    return op.bad + dtype_cases(op)


def _params(binding):
    return [pytest.param(op, case, id=f"{op.name}-{case.id}")
            for op in OPS.values() for case in all_cases(op) if binding in case.bindings]


# --- through PyTorch --------------------------------------------------------------


def run_torch(op, inputs, attrs, noncontiguous=()):
    return op.torch_op(*op.torch_args(tensors(inputs, noncontiguous), attrs))


@pytest.mark.parametrize("op,case", _params("torch"))
def test_torch_refuses(op, case):
    with pytest.raises(RuntimeError, match=case.match) as raised:
        run_torch(op, case.inputs, case.attrs, case.noncontiguous)
    # Every message starts with the op's name (TORCH_CHECK adds no prefix of its own).
    assert str(raised.value).startswith(f"{op.name}: "), str(raised.value)


# --- through ONNX Runtime ---------------------------------------------------------


def quiet_options(threads=None):
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 4  # the refused runs are expected: no error lines on stderr
    if threads:
        options.intra_op_num_threads = threads
    return options


def ort_model(op, inputs, attrs):
    """The single-node model, with each input declared in the op's own dtype
    (a case with another dtype feeds it to that model)."""
    return single_node_model(op.onnx_name, op.declared(inputs), op.output_names, **attrs)


def run_ort(op, inputs, attrs):
    sess = session(ort_model(op, inputs, attrs), sess_options=quiet_options())
    return sess.run(None, feeds(inputs))


@pytest.mark.parametrize("op,case", _params("ort"))
def test_ort_refuses(op, case):
    with pytest.raises(InvalidArgument, match=case.match) as raised:
        run_ort(op, case.inputs, case.attrs)
    message = str(raised.value)
    if "Unexpected input data type" not in message:  # the runtime's own check has no prefix
        assert f"Status Message: {op.name}: " in message, message


def test_ort_session_survives_refused_runs():
    """A refused run leaves the session usable: the next good run works."""
    knn = OPS["knn_query"]
    sess = session(ort_model(knn, KNN, knn.base.attrs), sess_options=quiet_options())
    rng = np.random.default_rng(0)
    xyz = rng.random((5, 3), dtype=np.float32)
    good = {**KNN, "xyz": xyz}
    for _ in range(3):
        with pytest.raises(InvalidArgument, match="offset must be non-decreasing"):
            sess.run(None, feeds({**good, "offset": i32(3, 2)}))
        idx, dist = sess.run(None, feeds(good))
        ref_idx, _ = knn_reference(2, xyz, KNN["offset"], KNN["new_xyz"], KNN["new_offset"])
        np.testing.assert_array_equal(idx, ref_idx)


# Errors ORT reports while creating the session (the kernel's constructor reads
# the attributes, or the runtime checks the declared types), not at run time.
# ORT wraps a kernel constructor's status into RUNTIME_EXCEPTION
# ("Exception during initialization: ..."), whatever its code.
def load_cases(op):
    """Models ORT refuses to load: an input declared with a dtype no kernel
    takes, and a required attribute left out (read by the kernel's
    constructor, whose status ORT wraps into RUNTIME_EXCEPTION)."""
    cases = []
    for spec in op.inputs:
        wrong = next(d for d in (I64, F64, I32) if d not in spec.onnx)
        declared = {**op.declared(op.base.inputs), spec.name: np.zeros(0, wrong)}
        cases.append(pytest.param(
            op, declared, op.base.attrs, InvalidGraph,
            rf"Type 'tensor\({ONNX[wrong]}\)' of input parameter \({spec.name}\) of operator "
            rf"\({op.onnx_name}\)", id=f"{op.name}-{spec.name}-declared-{wrong}"))
        if spec.same_as:  # each kernel takes one dtype for both: none matches a mix
            base = op.declared(op.base.inputs)
            other = next(d for d in spec.onnx if d != base[spec.same_as].dtype)
            cases.append(pytest.param(
                op, {**base, spec.name: np.zeros(0, other)}, op.base.attrs, Fail,
                rf"no kernel def matches node inputs for Op: {op.onnx_name}",
                id=f"{op.name}-{spec.name}-declared-{other}-unlike-{spec.same_as}"))
    for name, default in op.attrs.items():
        if default is None:
            attrs = {k: v for k, v in op.base.attrs.items() if k != name}
            cases.append(pytest.param(op, op.declared(op.base.inputs), attrs, RuntimeException,
                                      rf"{op.name}: attribute {name} \(int\) is required",
                                      id=f"{op.name}-{name}-missing"))
    return cases


LOAD_CASES = [case for op in OPS.values() for case in load_cases(op)]


@pytest.mark.parametrize("op,inputs,attrs,error,match", LOAD_CASES)
def test_ort_refuses_at_load(op, inputs, attrs, error, match):
    model = single_node_model(op.onnx_name, inputs, op.output_names, **attrs)
    with pytest.raises(error, match=match):
        session(model, sess_options=quiet_options())


# A node that leaves a required input or an output out (an empty name) is
# refused at load by every op, as ORT refuses it for its own ops.  my_add,
# once a lite op (which marks everything optional), loaded such a node and
# crashed at run time: the model runs in a child process, so a crash fails
# the test instead of ending the run.
EMPTY_NAMES = empty_name_cases(OPS.values())



@pytest.mark.parametrize("case", EMPTY_NAMES)
def test_ort_refuses_empty_required_names_at_load(case, tmp_path):
    from customops.check.runner import run_cases, stopped
    from customops.ort import library_path

    model, inputs = EMPTY_NAMES[case]
    (tmp_path / "model.onnx").write_bytes(model.SerializeToString())
    np.savez(tmp_path / "feeds.npz", **inputs)
    done = run_cases([{"id": case, "kind": "fresh", "model": str(tmp_path / "model.onnx"),
                       "feeds": [str(tmp_path / "feeds.npz")], "out": None}],
                     [library_path()], tmp_path / "child", timeout=120)[case]
    assert stopped(done) is None, stopped(done)
    op, kind, name = case.split("-")
    position = (OPS[op].input_names if kind == "input" else OPS[op].output_names).index(name)
    assert done["status"] == "refused-load" and "INVALID_GRAPH" in done["message"], done
    assert f"{kind} {position} is marked single but has an empty string" in done["message"]


def test_ort_nsample_zero_message_names_the_value():
    """A missing nsample fails at load; a bad value fails at run, like torch."""
    model = single_node_model("knnquery", KNN, ["idx", "dist"], nsample=0)
    with pytest.raises(InvalidArgument, match=r"knn_query: nsample must be at least 1, got 0"):
        session(model, sess_options=quiet_options()).run(None, feeds(KNN))


def test_ort_attribute_of_the_wrong_type_is_refused_not_replaced():
    """stride given as floats is refused at load, with the reason."""
    model = single_node_model("deform_conv2d", DCN, ["y"], **{**DCN_ATTRS, "stride": [1.0, 1.0]})
    with pytest.raises(Exception, match=r"deform_conv2d: attribute stride must be a list of ints"):
        session(model, sess_options=quiet_options()).run(None, feeds(DCN))


def test_ort_float_groups_is_refused():
    inputs = dict(DCN, weight=f32(6, 4, 3, 3), bias=f32(6))  # valid for groups=1 only
    model = single_node_model("deform_conv2d", inputs, ["y"], **{**DCN_ATTRS, "groups": 2.0,
                                                                 "offset_groups": 2})
    with pytest.raises(Exception, match="deform_conv2d: attribute groups must be an int"):
        session(model, sess_options=quiet_options()).run(None, feeds(inputs))


@pytest.mark.parametrize("weight_shape", [(6, 0, 3, 3), (6, 2, 0, 3)], ids=str)
def test_python_wrapper_reports_empty_weight(weight_shape):
    t = torch.from_numpy
    with pytest.raises(RuntimeError, match="weight"):
        customops.ops.deform_conv2d(t(DCN["input"]), t(DCN["offset"]), t(f32(*weight_shape)))


# --- empty inputs are not errors --------------------------------------------------

KNN_EMPTY = [
    pytest.param(f32(0, 3), i32(0), None, None, id="n0"),
    pytest.param(f32(0, 3), i32(0, 0, 0), f32(4, 3), i32(1, 1, 4), id="n0-queries"),
    pytest.param(f32(4, 3), i32(4), f32(0, 3), i32(0), id="m0"),
    pytest.param(f32(0, 3), i32(0), f32(0, 3), i32(0), id="n0-m0"),
    pytest.param(f32(6, 3), i32(0, 6, 6), f32(3, 3), i32(1, 1, 3), id="empty-clouds"),
]


@pytest.mark.parametrize("binding", ["torch", "ort"])
@pytest.mark.parametrize("xyz,offset,new_xyz,new_offset", KNN_EMPTY)
def test_empty_inputs_knn(binding, xyz, offset, new_xyz, new_offset):
    rng = np.random.default_rng(1)
    xyz = rng.random(xyz.shape, dtype=np.float32)
    inputs = dict(xyz=xyz, offset=offset, new_xyz=new_xyz, new_offset=new_offset)
    knn = OPS["knn_query"]
    if binding == "torch":
        idx, dist = (t.numpy() for t in run_torch(knn, inputs, {"nsample": 3}))
    else:
        idx, dist = run_ort(knn, inputs, {"nsample": 3})
    ref_idx, ref_dist = knn_reference(3, xyz, offset, new_xyz, new_offset)
    assert idx.shape == dist.shape == ref_idx.shape
    assert idx.dtype == np.int32 and dist.dtype == np.float32
    np.testing.assert_array_equal(idx, ref_idx)
    np.testing.assert_array_equal(dist, ref_dist)


@pytest.mark.parametrize("binding", ["torch", "ort"])
@pytest.mark.parametrize("shape", [(0,), (0, 3), (2, 0, 4)], ids=str)
def test_empty_inputs_my_add(binding, shape):
    inputs = dict(a=f32(*shape), b=f32(*shape))
    out = run_torch(OPS["my_add"], inputs, {}).numpy() if binding == "torch" else \
        run_ort(OPS["my_add"], inputs, {})[0]
    assert out.shape == shape and out.dtype == np.float32


@pytest.mark.parametrize("binding", ["torch", "ort"])
@pytest.mark.parametrize("mask,bias", [(True, True), (False, True), (True, False), (False, False)])
def test_empty_inputs_deform_conv2d(binding, mask, bias):
    inputs = dict(input=f32(0, 4, 6, 6), weight=f32(6, 2, 3, 3), offset=f32(0, 36, 4, 4),
                  mask=f32(0, 18, 4, 4) if mask else None, bias=f32(6) if bias else None)
    dcn = OPS["deform_conv2d"]
    out = run_torch(dcn, inputs, DCN_ATTRS).numpy() if binding == "torch" else \
        run_ort(dcn, inputs, DCN_ATTRS)[0]
    assert out.shape == (0, 6, 4, 4) and out.dtype == np.float32


@pytest.mark.parametrize("binding", ["torch", "ort"])
def test_largest_nsample_is_accepted_and_bounded(rng, binding):
    """nsample = 65536 (the limit) works on a small cloud (the whole output
    against the reference); one more is refused before any (m, nsample)
    output is allocated."""
    xyz = rng.random((3, 3), dtype=np.float32)
    inputs = dict(xyz=xyz, offset=i32(3), new_xyz=None, new_offset=None)
    knn = OPS["knn_query"]
    run = (lambda a: [t.numpy() for t in run_torch(knn, inputs, a)]) \
        if binding == "torch" else (lambda a: run_ort(knn, inputs, a))
    idx, dist = run({"nsample": 65536})
    assert idx.shape == (3, 65536) and (idx[:, 3:] == -1).all() and np.isinf(dist[:, 3:]).all()
    ref_idx, ref_dist = knn.reference(inputs, {"nsample": 65536})
    np.testing.assert_array_equal(idx, ref_idx)
    np.testing.assert_allclose(dist, ref_dist, rtol=1e-6)
    error = RuntimeError if binding == "torch" else InvalidArgument
    with pytest.raises(error, match="nsample must be at most 65536"):
        run({"nsample": 65537})


# --- counts -----------------------------------------------------------------------


def case_counts():
    counts = {}
    for op in OPS.values():
        cases = all_cases(op)
        counts[op.name] = {b: sum(b in c.bindings for c in cases) for b in ("torch", "ort")}
        counts[op.name]["ort-load"] = sum(1 for p in LOAD_CASES if p.values[0] is op)
    return counts


def test_summary(capsys):
    """Prints the number of bad inputs per op and binding (shown with -s or
    in the terminal summary); fails if a table lost its cases."""
    counts = case_counts()
    lines = [f"  {op:<14} torch {c['torch']:3d}   ort {c['ort']:3d} (+{c['ort-load']} at load)"
             for op, c in counts.items()]
    total = sum(c["torch"] + c["ort"] + c["ort-load"] for c in counts.values())
    with capsys.disabled():
        print("\nbad inputs tried per op and binding:\n" + "\n".join(lines) +
              f"\n  total {total}")
    for op, c in counts.items():
        assert c["torch"] >= 10 and c["ort"] >= 5, (op, c)
    for op in OPS.values():
        ids = [c.id for c in all_cases(op)]
        assert len(ids) == len(set(ids)), op.name  # every case id is unique within its op
        for c in all_cases(op):
            re.compile(c.match)
