"""Small virtualenvs holding another onnxruntime or torch release, built once
and cached outside the repository, for running a model, a library or an op
against a release other than the installed one.

    python -m customops.envs onnxruntime==1.24.4      # prints that venv's python
    python -m customops.envs torch==2.13.0+cpu onnxruntime==1.24.4

    from customops.envs import ort_python, torch_python
    python = ort_python("1.24.4")                     # the same from Python
    subprocess.run([python, "-c", "import onnxruntime; ..."])

Each venv holds the requirements given and numpy, nothing else (no onnx, no
customops): build or export the model in your own environment, save it to a
file, and load it there.  The cache is ``$CUSTOMOPS_CACHE/venvs`` (default
``~/.cache/customops/venvs``, beside the ORT headers of
``python -m customops.headers``).  The first call for a set of requirements
installs them from your package index (about 30 s for onnxruntime, a few
minutes for torch); later calls return at once.  A ``+cpu`` torch release
comes from PyTorch's own index: set
``PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu`` if yours lacks it.
Concurrent callers wait on a lock; a venv is moved into place only when
complete, so a broken install is never reused.
"""

from __future__ import annotations

import fcntl
import re
import shutil
import subprocess
import sys
import venv
from pathlib import Path

from .headers import cache_root

# numpy 2.3 dropped wheels that the older onnxruntime releases were built against
NUMPY = "numpy<2.3"
REQUIREMENT = re.compile(r"([A-Za-z][\w.-]*)==([\w.+]+)")


class EnvFailed(RuntimeError):
    pass


def venvs_dir() -> Path:
    return cache_root() / "venvs"


def env_python(*requirements: str) -> Path:
    """The python of a venv holding ``requirements`` (each ``name==version``)
    and numpy, built on first use."""
    if not requirements:
        raise EnvFailed("give at least one requirement, e.g. onnxruntime==1.24.4")
    for requirement in requirements:
        if not REQUIREMENT.fullmatch(requirement):
            raise EnvFailed(f"requirement {requirement!r}: expected name==version, "
                            "e.g. onnxruntime==1.24.4")
    root = venvs_dir()
    env = root / "-".join(r.replace("==", "-") for r in requirements)
    python = env / "bin" / "python"
    if python.exists():
        return python
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".{env.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not python.exists():  # another process may have built it meanwhile
            partial = root / f".{env.name}.partial"
            shutil.rmtree(partial, ignore_errors=True)
            venv.create(partial, with_pip=True)
            done = subprocess.run([partial / "bin" / "python", "-m", "pip", "install", "--quiet",
                                   "--disable-pip-version-check", *requirements, NUMPY],
                                  capture_output=True, text=True)
            if done.returncode != 0:
                shutil.rmtree(partial, ignore_errors=True)
                last = (done.stderr.strip().splitlines() or ["(no message)"])[-1]
                raise EnvFailed(f"pip could not install {' '.join(requirements)}: {last}")
            # A venv's python finds its packages from its own location, so the moved
            # venv works (its bin/ scripts' shebangs would not; we only use python).
            partial.rename(env)
    return python


def ort_python(version: str, *pins: str) -> Path:
    """The python of a venv with onnxruntime==version, numpy and the extra
    ``pins`` (e.g. "onnx==1.23.2")."""
    return env_python(f"onnxruntime=={version}", *pins)


def torch_python(version: str, *pins: str) -> Path:
    """The python of a venv with torch==version (e.g. "2.13.0+cpu"), numpy and
    the extra ``pins`` (e.g. "onnxruntime==1.24.4")."""
    return env_python(f"torch=={version}", *pins)


def ort_releases() -> list[Path]:
    """The pythons of the cached venvs holding only an onnxruntime release,
    oldest release first."""
    found = [p / "bin" / "python" for p in venvs_dir().glob("onnxruntime-*")
             if re.fullmatch(r"onnxruntime-[\d.]+", p.name) and (p / "bin" / "python").exists()]
    return sorted(found, key=lambda p: [int(x) for x in p.parent.parent.name[12:].split(".")])


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: python -m customops.envs NAME==VERSION... "
              "(e.g. onnxruntime==1.24.4, or torch==2.13.0+cpu onnxruntime==1.24.4)",
              file=sys.stderr)
        return 2 if not argv else 0
    try:
        print(env_python(*argv))
    except EnvFailed as error:
        print(f"customops.envs: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
