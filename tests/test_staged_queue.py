"""StagedQueue (csrc/kernels/parallel.h), the loop of stages the
deform_conv2d backward runs an image's bands in, driven by a small C++
program (tests/staged_case/staged_check.cc) with 1, 2 and 4 threads: every
task runs once, and no task starts before the earlier stages have finished."""

from pathlib import Path

from helpers import run_kernel_driver

ROOT = Path(__file__).resolve().parent.parent


def test_stages_run_in_order_and_every_task_once(tmp_path):
    done = run_kernel_driver(ROOT / "tests" / "staged_case/staged_check.cc", tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("ok: ") == 4, done.stdout
