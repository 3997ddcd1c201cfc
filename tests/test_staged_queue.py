"""StagedQueue (csrc/kernels/parallel.h), the loop of stages the
deform_conv2d backward runs an image's bands in, driven by a small C++
program (tests/staged_case/staged_check.cc) with 1, 2 and 4 threads: every
task runs once, and no task starts before the earlier stages have finished."""

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_stages_run_in_order_and_every_task_once(tmp_path):
    program = tmp_path / "staged_check"
    subprocess.run(["g++", "-std=c++17", "-O1", "-Wall", "-Werror", "-pthread",
                    f"-I{ROOT / 'csrc' / 'kernels'}",
                    str(ROOT / "tests" / "staged_case" / "staged_check.cc"), "-o",
                    str(program)], check=True)
    done = subprocess.run([str(program)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("ok: ") == 4, done.stdout
