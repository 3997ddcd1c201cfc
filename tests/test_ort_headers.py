"""python -m customops.headers refuses a header tarball whose sha256 is not the
pinned one, before extracting anything.  `npm` is replaced by a stand-in
script that "packs" a tampered tarball, so no network is needed."""

import hashlib
import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from customops import headers

FAKE_NPM = """#!{python}
import shutil, sys
shutil.copy({tarball!r}, "com.github.asus4.onnxruntime-0.4.9.tgz")
print("com.github.asus4.onnxruntime-0.4.9.tgz")
"""


def tampered_tarball(path: Path) -> Path:
    """A tarball laid out like the real package, with every required header
    present (so only the checksum can reject it)."""
    with tarfile.open(path, "w:gz") as tar:
        for name in headers.REQUIRED:
            data = b"/* not Microsoft's header */\n"
            info = tarfile.TarInfo(headers.HEADERS_IN_PACKAGE + name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_verify_accepts_the_pinned_digest_only(tmp_path):
    archive = tampered_tarball(tmp_path / "package.tgz")
    headers.verify_sha256(archive, hashlib.sha256(archive.read_bytes()).hexdigest())
    with pytest.raises(headers.HeadersNotFound, match="sha256 mismatch for package.tgz"):
        headers.verify_sha256(archive)


def test_tampered_npm_tarball_stops_with_one_line_and_no_cache(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    npm = bin_dir / "npm"
    npm.write_text(FAKE_NPM.format(python=sys.executable,
                                   tarball=str(tampered_tarball(tmp_path / "package.tgz"))))
    npm.chmod(0o755)
    cache = tmp_path / "cache"
    env = {k: v for k, v in os.environ.items() if k != "ORT_INCLUDE_DIR"}
    env.update(PATH=f"{bin_dir}{os.pathsep}{env['PATH']}", CUSTOMOPS_CACHE=str(cache))

    done = subprocess.run([sys.executable, "-m", "customops.headers"], env=env,
                          capture_output=True, text=True)

    assert done.returncode != 0
    lines = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert "sha256 mismatch" in lines[0]
    assert headers.NPM_TARBALL_SHA256 in lines[0]
    assert not list(cache.rglob("*.h")), "nothing may be extracted into the cache"


def test_the_headers_are_the_release_the_tool_names():
    """The fetched headers' API version is HEADERS_VERSION's minor (29 for 1.29):
    what docs/versions.md and RegisterCustomOps's negotiation assume."""
    if os.environ.get("ORT_INCLUDE_DIR"):
        pytest.skip("ORT_INCLUDE_DIR chooses other headers")
    header = (headers.include_dir() / "onnxruntime_c_api.h").read_text()
    expected = headers.HEADERS_VERSION.split(".")[1]
    assert f"#define ORT_API_VERSION {expected}\n" in header


def test_the_command_prints_the_directory_a_g_plus_plus_line_needs():
    """`export ORT_INCLUDE=$(python -m customops.headers)`, as the checklist says:
    one line on stdout, the directory holding the headers."""
    done = subprocess.run([sys.executable, "-m", "customops.headers"], capture_output=True,
                          text=True, check=True)
    assert len(done.stdout.splitlines()) == 1
    assert (Path(done.stdout.strip()) / "onnxruntime_cxx_api.h").is_file()
