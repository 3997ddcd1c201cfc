"""examples/ship_op (notebook 19 builds its wheel and runs it in another torch):
the guard of its setup.py."""

import os
import subprocess
import sys
from pathlib import Path

SHIP = Path(__file__).resolve().parent.parent / "examples" / "ship_op"


def test_setup_without_the_ort_headers_says_how_to_get_them_in_one_line():
    env = {k: v for k, v in os.environ.items() if k != "ORT_INCLUDE_DIR"}
    done = subprocess.run([sys.executable, "setup.py", "--version"], cwd=SHIP, capture_output=True,
                          text=True, env=env)
    assert done.returncode == 1 and done.stdout == "" and done.stderr.count("\n") == 1, done.stderr
    assert "set ORT_INCLUDE_DIR to a directory holding onnxruntime_cxx_api.h" in done.stderr
    assert "$(python -m customops.headers)" in done.stderr
