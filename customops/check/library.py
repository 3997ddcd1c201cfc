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


# A prefix shared by this many exported C names (png_*, jpeg_*) is a library
# compiled in whole, not an API written for the op's users.
FAMILY = 8


def system_symbols() -> set:
    """The dynamic symbols defined by the shared libraries of the linker cache
    (ldconfig -p): a C name among them binds to whichever copy loads first."""
    done = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True)
    paths = sorted(set(re.findall(r"\(libc6,x86-64[^)]*\) => (\S+)", done.stdout)))
    found = subprocess.run(["nm", "-D", "--defined-only", *paths], capture_output=True,
                           text=True) if paths else None
    return {line.split()[-1] for line in (found.stdout.splitlines() if found else [])
            if len(line.split()) == 3}


def namespaces(mangled: list) -> dict:
    """Top-level namespace (std, dlib, ...) -> how many of these C++ symbols it has."""
    done = subprocess.run(["c++filt"], input="\n".join(mangled), capture_output=True, text=True)
    counts = {}
    for name in done.stdout.splitlines():
        name = re.sub(r"^(typeinfo name for|typeinfo for|vtable for|VTT for|guard variable for|"
                      r"construction vtable for .*-in-|non-virtual thunk to|virtual thunk to) ",
                      "", name)
        name = re.sub(r"^[\w:<>, *&]*? (?=\w+::)", "", name)  # a return type before it
        head = re.split(r"<|\(", name, 1)[0]
        top = head.split("::")[0] + "::" if "::" in head else "the global namespace"
        counts[top] = counts.get(top, 0) + 1
    return counts


def sorted_exports(symbols: list, system: set) -> dict:
    """The exports by kind: "entry" (Register*, PyInit_*), "c_api" (other C
    names: a public API the author meant, e.g. onnxruntime-extensions'
    AddExternalCustomOp), "cxx" (C++ names: inline and template code of the
    headers and of what was compiled in, which binds to another library's
    copy of the same function), "vendored" (C names of a library compiled in:
    a name a system library also defines, one with a leading underscore, or
    one of a family of FAMILY or more sharing a prefix, as png_*)."""
    kinds = {"entry": [], "c_api": [], "cxx": [], "vendored": []}
    families = {}
    for name in symbols:
        if "_" in name.strip("_"):
            families.setdefault(name.split("_")[0], []).append(name)
    for name in symbols:
        family = families.get(name.split("_")[0], []) if "_" in name.strip("_") else []
        kind = ("entry" if name.startswith(("Register", "PyInit_")) else
                "cxx" if name.startswith("_Z") else
                "vendored" if name.startswith("_") or name in system or len(family) >= FAMILY
                else "c_api")
        kinds[kind].append(name)
    return kinds


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
        kinds = sorted_exports(symbols, system_symbols() if len(symbols) > 1 else set())
        if "RegisterCustomOps" not in symbols:
            problems.append(f"{name} does not export RegisterCustomOps")
        if kinds["cxx"] or kinds["vendored"]:
            spaces = sorted(namespaces(kinds["cxx"]).items(), key=lambda kv: -kv[1])
            parts = [f"{len(kinds['cxx'])} C++ ("
                     + ", ".join(f"{n} {c}" for n, c in spaces[:4]) + ")"] if spaces else []
            parts += [f"{len(kinds['vendored'])} C names of compiled-in libraries (e.g. "
                      f"{', '.join(kinds['vendored'][:3])})"] if kinds["vendored"] else []
            api = (f"; its public C API of {len(kinds['c_api'])} (e.g. "
                   f"{', '.join(kinds['c_api'][:3])}) is deliberate: keep it" if kinds["c_api"]
                   else "")
            problems.append(
                f"{name} exports {len(kinds['cxx']) + len(kinds['vendored'])} symbols besides its "
                f"entry point that can clash with another library's copy in the process: "
                f"{' and '.join(parts)}{api}; link with a version script that keeps only "
                f"RegisterCustomOps{' and the C API' if api else ''} global "
                "(-Wl,--version-script=FILE)")
        elif kinds["c_api"]:
            findings.append(f"{name} also exports a C API of {len(kinds['c_api'])} (e.g. "
                            f"{', '.join(kinds['c_api'][:3])}): deliberate, reported")
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
