"""The PyTorch ops under torch.library's scrutiny, for every op of the table.

* ``torch.library.opcheck`` on every sample call of tests/optable.py: the
  schema, the fake (meta) kernel against the real one (shapes, dtypes,
  strides), autograd registration, and tracing with dynamic shapes.
* The fake kernels repeat the C++ checks that need no tensor data: every bad
  call of the table that PyTorch refuses is refused by the fake kernel too,
  with the same message, unless its error depends on tensor values
  (offsets), which only the real kernel sees.
* So ``torch.compile`` rejects a bad call while tracing.
"""

import numpy as np
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from optable import OPS, tensors
from test_errors import all_cases, run_torch

SAMPLES = [pytest.param(op, s, id=f"{op.name}-{s.id}")
           for op in OPS.values() for s in op.samples(np.random.default_rng(0))]


@pytest.mark.parametrize("op,sample", SAMPLES)
def test_opcheck(op, sample):
    t = tensors(sample.inputs, sample.noncontiguous)
    if op.differentiable:
        t = {k: v.requires_grad_() if v is not None and v.is_floating_point() else v
             for k, v in t.items()}
    torch.library.opcheck(op.torch_op, op.torch_args(t, sample.attrs))


BAD = [pytest.param(op, case, id=f"{op.name}-{case.id}")
       for op in OPS.values() if op.fake_checks
       for case in all_cases(op) if "torch" in case.bindings]


def run_fake(op, case):
    with FakeTensorMode() as mode:
        fake = {k: None if v is None else mode.from_tensor(v)
                for k, v in tensors(case.inputs, case.noncontiguous).items()}
        return op.torch_op(*op.torch_args(fake, case.attrs))


@pytest.mark.parametrize("op,case", BAD)
def test_fake_kernel_refuses_like_the_real_one(op, case):
    with pytest.raises(RuntimeError) as real:
        run_torch(op, case.inputs, case.attrs, case.noncontiguous)
    if case.values:  # only the data shows it: the fake kernel lets it through
        run_fake(op, case)
        return
    with pytest.raises(RuntimeError) as fake:
        run_fake(op, case)
    assert str(fake.value) == str(real.value)


def test_every_op_is_checked_by_its_fake_kernel_or_says_so():
    assert {op.name for op in OPS.values() if op.fake_checks} >= {"my_add", "knn_query"}


@pytest.mark.parametrize("op", [op for op in OPS.values() if op.fake_checks], ids=lambda o: o.name)
def test_compile_rejects_a_bad_call_while_tracing(op):
    """A wrong dtype on the first input: torch.compile fails in Dynamo's fake
    propagation (TorchRuntimeError), before any kernel runs."""
    import torch._dynamo

    case = next(c for c in all_cases(op) if c.id.startswith(op.inputs[0].name + "-int32"))
    args = op.torch_args(tensors(case.inputs), case.attrs)
    tensor_at = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]

    def call(*values):
        full = list(args)
        for i, value in zip(tensor_at, values):
            full[i] = value
        return op.torch_op(*full)

    values = [args[i] for i in tensor_at]
    with pytest.raises(RuntimeError) as real:
        call(*values)
    torch._dynamo.reset()
    with pytest.raises(torch._dynamo.exc.TorchRuntimeError) as traced:
        torch.compile(call, backend="eager", fullgraph=True)(*values)
    assert str(real.value) in str(traced.value)
