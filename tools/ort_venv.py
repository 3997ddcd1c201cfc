"""A small virtualenv holding one other onnxruntime release, built once and
cached in build/ort-venvs/ (git-ignored), for running a model against a
runtime other than the pinned one.

    from ort_venv import ort_python            # with tools/ on sys.path
    python = ort_python("1.24.4")              # path of that venv's python
    subprocess.run([python, "-c", "import onnxruntime; ..."])

    python tools/ort_venv.py 1.24.4            # the same from a shell; prints the path

Used by tests/test_ort_versions.py and notebook 02.  The first call for a
release installs onnxruntime and numpy from PyPI (about 30 s); later calls
return at once.  Concurrent callers wait on a lock; a venv is moved into
place only when complete, so a broken install is never reused.
"""

from __future__ import annotations

import fcntl
import shutil
import subprocess
import sys
import venv
from pathlib import Path

VENVS = Path(__file__).resolve().parent.parent / "build" / "ort-venvs"
# numpy 2.3 dropped wheels that the older onnxruntime releases were built against
NUMPY = "numpy<2.3"


def ort_python(version: str, *pins: str) -> Path:
    """The python of a venv with onnxruntime==version, numpy and the extra
    ``pins`` (e.g. "onnx==1.23.2"), built on first use."""
    env = VENVS / "-".join([f"onnxruntime-{version}", *pins]).replace("=", "")
    python = env / "bin" / "python"
    if python.exists():
        return python
    VENVS.mkdir(parents=True, exist_ok=True)
    with open(VENVS / f".{env.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not python.exists():  # another process may have built it meanwhile
            partial = VENVS / f".{env.name}.partial"
            shutil.rmtree(partial, ignore_errors=True)
            venv.create(partial, with_pip=True)
            subprocess.run([partial / "bin" / "python", "-m", "pip", "install", "--quiet",
                            "--disable-pip-version-check", f"onnxruntime=={version}", NUMPY, *pins],
                           check=True, capture_output=True)
            # A venv's python finds its packages from its own location, so the moved
            # venv works (its bin/ scripts' shebangs would not; we only use python).
            partial.rename(env)
    return python


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python tools/ort_venv.py ONNXRUNTIME_VERSION")
    try:
        print(ort_python(sys.argv[1]))
    except subprocess.CalledProcessError as e:
        sys.exit(f"pip could not install onnxruntime=={sys.argv[1]}: "
                 f"{e.stderr.decode().strip().splitlines()[-1] if e.stderr else e}")
