"""csrc/kernels/cpu/scratch.h, the scratch a kernel call keeps for the
thread's next call, driven by a small C++ program
(tests/scratch_case/scratch_check.cc) through the cases no op call reaches:
a failed allocation, a nested Scratch, another thread."""

from pathlib import Path

from helpers import run_kernel_driver

ROOT = Path(__file__).resolve().parent.parent


def test_scratch_blocks(tmp_path):
    done = run_kernel_driver(ROOT / "tests" / "scratch_case/scratch_check.cc", tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("ok: ") == 7, done.stdout
