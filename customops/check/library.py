"""The library-file check: what it exports, what it needs at load, which
OrtApi version it asks for.

Exports and needs come from binutils (nm -D, readelf -d; ELF only).  A
library should export its registration entry point(s) and nothing else:
other exported symbols (inline functions of the ORT C++ wrappers and of the
C++ standard library, which -fvisibility=hidden alone does not hide) can
bind to another library's copy in the same process; a linker version script
keeps them local (csrc/ort/exports.lds).  It should not need libonnxruntime (the Python wheel has no
libonnxruntime.so to find, and the process has its runtime already) nor
libtorch (a deployment has no torch).  The API version is observed, not
guessed: api_probe.py calls RegisterCustomOps in each runtime at hand and
records what it asks GetApi for.  A library may refuse a release other than
the installed one (too old for it) from RegisterCustomOps with a status: that
is a clear refusal, reported, not a failure.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

from .record import record

PROBE = Path(__file__).with_name("api_probe.py")
# Symbols every shared object defines (linker-made), not the author's choice.
LINKER_SYMBOLS = {"_init", "_fini", "_edata", "_end", "__bss_start"}
FORBIDDEN_NEEDS = re.compile(r"lib(onnxruntime|torch|c10)\b")


def exports(library: str) -> list:
    done = subprocess.run(["nm", "-D", "--defined-only", library], capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(done.stderr.strip().splitlines()[-1])
    return [line.split()[-1] for line in done.stdout.splitlines()
            if line.split() and line.split()[-1] not in LINKER_SYMBOLS]


def needs(library: str) -> list:
    done = subprocess.run(["readelf", "-d", library], capture_output=True, text=True)
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", done.stdout)


def asked(library: str, python, timeout: float) -> dict:
    """api_probe.py's answer in one runtime: {"runtime", "asked", "status"} or {"crash"}."""
    try:
        done = subprocess.run([str(python), str(PROBE), library], capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"crash": f"RegisterCustomOps did not return within {timeout:g} s"}
    if done.returncode:
        tail = (done.stderr.strip().splitlines() or [""])[-1]
        return {"crash": f"RegisterCustomOps ended the process ({done.returncode}: {tail})"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def check(target, pythons, timeout):
    if not (shutil.which("nm") and shutil.which("readelf")):
        return record("library", False, "cannot inspect the library: nm and readelf (binutils) "
                      "are not installed")
    findings, problems = [], []
    for library in target.libraries:
        name = Path(library).name
        try:
            symbols = exports(library)
        except RuntimeError as error:
            return record("library", False, f"{name}: nm cannot read it ({error})")
        extra = [s for s in symbols if not s.startswith("Register")]
        if "RegisterCustomOps" not in symbols:
            problems.append(f"{name} does not export RegisterCustomOps")
        if extra:
            problems.append(f"{name} exports {len(extra)} symbols besides its entry point "
                            f"(e.g. {extra[0]}): link with a version script that keeps only "
                            "RegisterCustomOps global (-Wl,--version-script=FILE)")
        bad = [n for n in needs(library) if FORBIDDEN_NEEDS.match(n)]
        if bad:
            problems.append(f"{name} needs {', '.join(bad)} at load (DT_NEEDED)")
        versions = []
        for python in [*pythons, sys.executable]:
            answer = asked(library, python, timeout)
            if "crash" in answer:
                problems.append(f"{name}: {answer['crash']} under the runtime of {python}")
                continue
            minor = int(answer["runtime"].split(".")[1])
            wanted = ", ".join(map(str, answer["asked"])) or "none through its OrtApiBase"
            versions.append(f"GetApi({wanted}) of {answer['runtime']}")
            if any(v > minor for v in answer["asked"]):
                problems.append(f"{name} asks onnxruntime {answer['runtime']} for API version "
                                f"{max(answer['asked'])}, newer than its {minor} (GetApi "
                                "returns NULL): ask for min(runtime, headers)")
            if answer["status"] and python == sys.executable:
                problems.append(f"{name}: RegisterCustomOps failed in {answer['runtime']} "
                                f"(installed): {answer['status']}")
            elif answer["status"]:  # another release, refused with a status: a clear refusal
                versions[-1] += f", which it refuses ({answer['status']})"
        findings.append(f"{name} exports only {', '.join(symbols)}, needs neither libonnxruntime "
                        f"nor libtorch, asks {'; '.join(versions)}")
    if problems:
        return record("library", False, problems[0])
    return record("library", True, "; ".join(findings))
