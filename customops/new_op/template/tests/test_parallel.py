"""The math's parallel_for (csrc/parallel.h): the same outputs at 1 and at 2
threads, in ORT (the session's intra_op_num_threads) and in PyTorch
(torch.set_num_threads), on inputs that take about 2 ms of CPU time on one
thread (sized as `make bench` sizes them), which a grain of some microseconds
splits."""

import numpy as np
import pytest
import torch
from conftest import BUILD, run_ort

from bench import call_torch, scaled_sample
from schema import DTYPES, NAME


@pytest.fixture(scope="module", params=DTYPES)
def large(request):
    before = torch.get_num_threads()
    yield request.param, scaled_sample(request.param, 2e-3)
    torch.set_num_threads(before)


def assert_identical(one, two):
    assert len(one) == len(two)
    for a, b in zip(one, two):
        np.testing.assert_array_equal(a, b)


def test_torch_same_outputs_at_1_and_2_threads(large):
    _, arrays = large
    assert_identical(call_torch(arrays, 1), call_torch(arrays, 2))


def test_ort_same_outputs_at_1_and_2_threads_as_torch(large):
    dtype, arrays = large
    model = BUILD / f"{NAME}_{dtype}.onnx"  # the torch.export route's, with every input
    one, two = (run_ort(model, arrays, intra_op_threads=n) for n in (1, 2))
    assert_identical(one, two)
    assert_identical(two, call_torch(arrays, 2))  # the same kernel: equal to the bit
