"""Locate the ONNX Runtime C/C++ headers that csrc/ort/ compiles against.

The onnxruntime wheel ships no headers.  In order of preference:

1. ``ORT_INCLUDE_DIR``: a directory holding ``onnxruntime_cxx_api.h``, e.g.
   ``include/`` of an ONNX Runtime release archive or conda-forge's
   ``onnxruntime-cpp`` (``$CONDA_PREFIX/include/onnxruntime``).
2. A cache outside the repository (``$CUSTOMOPS_CACHE`` or
   ``~/.cache/customops``) filled once from the npm registry package
   ``com.github.asus4.onnxruntime@0.4.9``, which carries Microsoft's headers of
   ONNX Runtime 1.29 (MIT licence) inside its iOS framework.  They are the
   newest a package registry ships (checked November 2026, onnxruntime 1.32.0
   released): the onnxruntime wheels carry none, npm's onnxruntime-node 1.30.0
   only the shared libraries.  The library asks the runtime for
   min(its API version, 29), so these headers serve every runtime >= 1.24.  The tarball's
   sha256 must match ``NPM_TARBALL_SHA256`` before anything is extracted, so
   a republished or tampered package stops the build instead of compiling
   unknown headers into the library.

Run ``python -m customops.headers`` to print the directory (fetching it once if
needed), e.g. ``export ORT_INCLUDE=$(python -m customops.headers)`` in a shell;
``customops.headers.include_dir()`` from Python.  Without CUSTOMOPS_CACHE the
cache is ``~/.cache/customops/onnxruntime-headers-1.29``.  The op projects
that ``python -m customops.new_op`` writes carry a copy, ``tools/ort_headers.py``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

NPM_PACKAGE = "com.github.asus4.onnxruntime@0.4.9"
HEADERS_VERSION = "1.29"  # the ORT release of the package's headers (ORT_API_VERSION 29)
# sha256 of `npm pack com.github.asus4.onnxruntime@0.4.9` (149,786,233 bytes).
NPM_TARBALL_SHA256 = "e59788788818fdde1b2e522e766a21ba0f7d8391de55737abf81e32cc801785d"
HEADERS_IN_PACKAGE = (
    "package/Plugins/iOS~/onnxruntime.xcframework/ios-arm64/"
    "onnxruntime.framework/Headers/"
)
REQUIRED = ("onnxruntime_c_api.h", "onnxruntime_cxx_api.h", "onnxruntime_lite_custom_op.h")


class HeadersNotFound(RuntimeError):
    pass


def _complete(directory: Path) -> bool:
    return all((directory / name).is_file() for name in REQUIRED)


def cache_root() -> Path:
    """``$CUSTOMOPS_CACHE`` or ``~/.cache/customops``: the headers, and the venvs of
    ``python -m customops.envs``."""
    return Path(os.environ.get("CUSTOMOPS_CACHE") or Path.home() / ".cache" / "customops")


def cache_dir() -> Path:
    return cache_root() / f"onnxruntime-headers-{HEADERS_VERSION}"


def verify_sha256(archive: Path, expected: str = NPM_TARBALL_SHA256) -> None:
    """Raises HeadersNotFound unless the file's sha256 is ``expected``."""
    digest = hashlib.sha256()
    with open(archive, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    if digest.hexdigest() != expected:
        raise HeadersNotFound(
            f"sha256 mismatch for {archive.name} from npm ({NPM_PACKAGE}): got "
            f"{digest.hexdigest()}, expected {expected}; refusing to extract it.  The "
            "package was changed or the download corrupted.  Set ORT_INCLUDE_DIR to a "
            "directory containing onnxruntime_cxx_api.h instead."
        )


def _fetch_from_npm(target: Path) -> None:
    npm = shutil.which("npm")
    if npm is None:
        raise HeadersNotFound(
            "ONNX Runtime headers not found: npm is not installed, so they cannot be "
            f"fetched from the npm package {NPM_PACKAGE}.  Install Node.js/npm, or set "
            "ORT_INCLUDE_DIR to a directory containing onnxruntime_cxx_api.h "
            "(an ONNX Runtime release's include/ or conda-forge onnxruntime-cpp)."
        )
    with tempfile.TemporaryDirectory() as tmp:
        print(f"fetching ONNX Runtime headers from npm: {NPM_PACKAGE}", file=sys.stderr)
        done = subprocess.run(
            [npm, "pack", NPM_PACKAGE, "--silent"], cwd=tmp, capture_output=True, text=True
        )
        if done.returncode != 0:
            raise HeadersNotFound(
                f"`npm pack {NPM_PACKAGE}` failed ({done.stderr.strip()}).  Set "
                "ORT_INCLUDE_DIR to a directory containing onnxruntime_cxx_api.h instead."
            )
        archive = Path(tmp) / done.stdout.strip().splitlines()[-1]
        verify_sha256(archive)
        staging = Path(tmp) / "headers"
        staging.mkdir()
        with tarfile.open(archive) as tar:
            for member in tar.getmembers():
                if member.isfile() and member.name.startswith(HEADERS_IN_PACKAGE):
                    member.name = member.name[len(HEADERS_IN_PACKAGE):]
                    tar.extract(member, staging, filter="data")
        if not _complete(staging):
            raise HeadersNotFound(f"{NPM_PACKAGE} does not contain {', '.join(REQUIRED)}")
        target.parent.mkdir(parents=True, exist_ok=True)
        # Move into place in one step so a half-written cache is never used.
        shutil.move(str(staging), str(target))


def include_dir() -> Path:
    override = os.environ.get("ORT_INCLUDE_DIR")
    if override:
        path = Path(override).expanduser()
        if not _complete(path):
            raise HeadersNotFound(
                f"ORT_INCLUDE_DIR={override} does not contain {', '.join(REQUIRED)}"
            )
        return path
    cached = cache_dir()
    if not _complete(cached):
        _fetch_from_npm(cached)
    return cached


if __name__ == "__main__":
    try:
        print(include_dir())
    except HeadersNotFound as error:
        sys.exit(f"error: {error}")
