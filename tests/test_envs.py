"""`python -m customops.envs`: the venvs of other onnxruntime and torch
releases that the notebooks, the tests and `customops.check` run in, cached
outside the repository."""

import os
import subprocess
import sys
from pathlib import Path

from customops.envs import ort_python, venvs_dir

ROOT = Path(__file__).resolve().parent.parent


def envs(*args, **environ):
    return subprocess.run([sys.executable, "-m", "customops.envs", *args], capture_output=True,
                          text=True, env={**os.environ, **environ}, timeout=300)


def test_the_command_prints_the_python_that_ort_python_returns():
    done = envs("onnxruntime==1.24.4")
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()) == ort_python("1.24.4")
    assert not ort_python("1.24.4").is_relative_to(ROOT)  # a learner's clone is not needed


def test_the_cache_is_customops_cache_and_a_failed_install_leaves_nothing(tmp_path):
    done = envs("onnxruntime==0.0.1", CUSTOMOPS_CACHE=str(tmp_path))
    assert done.returncode == 1 and done.stdout == "" and done.stderr.count("\n") == 1
    assert "pip could not install onnxruntime==0.0.1" in done.stderr
    assert [p.name for p in (tmp_path / "venvs").iterdir()] == [".onnxruntime-0.0.1.lock"]


def test_a_requirement_without_a_version_is_refused_in_one_line():
    done = envs("onnxruntime")
    assert done.returncode == 1 and done.stderr.count("\n") == 1
    assert "requirement 'onnxruntime': expected name==version" in done.stderr
    assert not (venvs_dir() / "onnxruntime").exists()
