"""Each op's correctness tests under every vector code this CPU can execute.

The kernels pick their vector code once per process (csrc/kernels/cpu/simd.h):
the best the CPU has, capped by CUSTOMOPS_ISA=baseline|avx2|avx512.  A test
run exercises only the pick, so a bug in the portable (SSE2/NEON) copy or in
the AVX2 copy on an AVX-512 machine would pass every other test.  Here a
child pytest runs a focused subset per code, the cap set in its environment.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from customops.ops import _C
from optable import OPS

ROOT = Path(__file__).resolve().parent.parent
ISAS = ("baseline", "avx2", "avx512")  # simd.h's Isa, weakest first

# Each op's comparisons against its independent reference, both bindings
# (forward and gradients): fast enough to run once per vector code.
CORRECTNESS = {
    "my_add": ["tests/test_my_add.py::test_torch_op_matches_numpy",
               "tests/test_my_add.py::test_ort_kernel_matches_numpy",
               "tests/test_my_add.py::test_float16_rounding_matches_numpy_on_every_half"],
    "knn_query": ["tests/test_knn_query.py::test_matches_brute_force",
                  "tests/test_knn_query.py::test_matches_brute_force_where_density_jumps",
                  "tests/test_knn_query.py::test_matches_ckdtree_on_large_clouds"],
    "deform_conv2d": [
        "tests/test_deform_conv2d.py::test_both_bindings_match_torchvision",
        "tests/test_deform_conv2d.py::test_ort_node_without_mask_but_with_bias",
        "tests/test_deform_conv2d_grad.py::test_float64_gradients_equal_torchvision",
        "tests/test_deform_conv2d_grad.py::test_float32_gradients_equal_torchvision_in_float64",
        "tests/test_deform_conv2d_grad.py::test_float16_gradients_are_float32_rounded_once"],
    "ms_deform_attn": ["tests/test_ms_deform_attn.py::test_matches_numpy_reference",
                       "tests/test_ms_deform_attn.py::test_matches_grid_sample_formula",
                       "tests/test_ms_deform_attn.py::test_borders_match_grid_sample_formula",
                       "tests/test_ms_deform_attn.py::test_gradients_match_grid_sample_formula"],
}

# The child first checks that the cap took effect, then runs the tests.
CHILD = """
import sys
import pytest
from customops.ops import _C
assert _C.vector_code() == sys.argv[1], f"asked for {sys.argv[1]}, runs {_C.vector_code()}"
sys.exit(pytest.main(sys.argv[2:]))
"""


def executable() -> tuple:
    """The codes this CPU runs: its best (what this process picked, with no
    cap in its environment) and every weaker one."""
    return ISAS[:ISAS.index(_C.vector_code()) + 1]


def test_every_op_has_correctness_tests_listed():
    assert set(CORRECTNESS) == set(OPS)


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("isa", executable())
def test_correct_under_every_vector_code(op, isa):
    env = {**os.environ, "CUSTOMOPS_ISA": isa}
    args = ["-p", "no:nbval", "-p", "no:cacheprovider", "-o", "addopts=", "-q",
            *CORRECTNESS[op]]
    done = subprocess.run([sys.executable, "-c", CHILD, isa, *args], capture_output=True,
                          text=True, env=env, cwd=ROOT)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert " passed" in done.stdout and "skipped" not in done.stdout, done.stdout[-1000:]
