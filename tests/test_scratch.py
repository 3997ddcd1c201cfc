"""csrc/kernels/cpu/scratch.h, the scratch a kernel call keeps for the
thread's next call, driven by a small C++ program
(tests/scratch_case/scratch_check.cc) through the cases no op call reaches:
a failed allocation, a nested Scratch, another thread."""

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_scratch_blocks(tmp_path):
    program = tmp_path / "scratch_check"
    subprocess.run(["g++", "-std=c++17", "-O1", "-Wall", "-Werror", "-pthread",
                    f"-I{ROOT / 'csrc' / 'kernels'}",
                    str(ROOT / "tests" / "scratch_case" / "scratch_check.cc"), "-o",
                    str(program)], check=True)
    done = subprocess.run([str(program)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("ok: ") == 7, done.stdout
