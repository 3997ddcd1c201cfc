"""`make mutants`: plant each bug of mutants/*.patch and check that its tests fail.

Each patch is a small planted bug with a header naming the tests that must
catch it (see mutants/README.md).  The run happens in a copy of the sources
under build/mutants/ (git-ignored), like tools/sanitize.sh: the repository's
files and its built libraries are never touched.  Per mutant: apply the patch
to the copy, rebuild the compiled parts if the patch touched csrc/ (ninja
recompiles only what changed), run its tests with pytest from inside the
copy, undo the patch.  A mutant is caught when its tests fail (pytest status
1); it is missed when they pass.  Anything else (the patch no longer applies,
the build breaks, pytest cannot collect) is an error in the mutant.

First the tests named by all mutants run once on the unmutated copy: they
must pass, or "caught" would mean nothing.

    python tools/mutants.py                # every mutant
    python tools/mutants.py NAME...        # some, in this order (Python ones first)
    python tools/mutants.py --check        # only: every patch still applies (CI)

Prints one line per mutant and a summary; exits 1 when any mutant is missed
or broken.  Cost on 2 cores: about 75 s of build per C++ mutant, plus its
tests.  Environment: PY (interpreter, default .venv/bin/python), MAX_JOBS.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MUTANTS = ROOT / "mutants"
OUT = ROOT / "build" / "mutants"
COPY = OUT / "src"
# Present while the copy's libraries may hold a mutant (a run stopped midway).
DIRTY = OUT / "libraries-mutated"
# What the build and the tests need; the copy keeps its build/ and *.so.
SOURCES = ("csrc", "customops", "tests", "tools", "setup.py", "pyproject.toml")
SKIPPED = {"__pycache__", ".hypothesis", ".pytest_cache"}
TIMEOUT = 1800  # seconds per test run: a mutant that hangs is reported, not waited on


@dataclass
class Mutant:
    name: str
    path: Path
    summary: str
    tests: list
    touches_cpp: bool


def parse(path: Path) -> Mutant:
    """The header: 'Mutant: <what the bug is>' and 'Tests: <pytest ids>' lines
    before the diff."""
    text = path.read_text()
    header = text.split("\ndiff --git", 1)[0]
    fields = dict(re.findall(r"^(Mutant|Tests):\s*(.+)$", header, re.M))
    files = re.findall(r"^diff --git a/(\S+)", text, re.M)
    if "Mutant" not in fields or "Tests" not in fields or not files:
        raise SystemExit(f"mutants: {path.name}: needs 'Mutant:' and 'Tests:' lines and a diff")
    for test in fields["Tests"].split():
        if not (ROOT / test.split("::")[0]).is_file():
            raise SystemExit(f"mutants: {path.name}: no test file {test.split('::')[0]}")
    return Mutant(path.stem, path, fields["Mutant"], fields["Tests"].split(),
                  any(f.startswith("csrc/") for f in files))


def git_apply(mutant: Mutant, cwd: Path, *flags) -> subprocess.CompletedProcess:
    # The copy lies inside this repository's work tree, and `git apply` run in a
    # subdirectory of a repository silently skips every file outside that
    # subdirectory (all of them here): stop git's search for a repository above cwd.
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(cwd.parent)}
    return subprocess.run(["git", "apply", *flags, str(mutant.path)], cwd=cwd,
                          capture_output=True, text=True, env=env)


def sync_copy() -> bool:
    """Copies into COPY every source file that differs from the copy's (a new
    modification time, so ninja rebuilds from it) and removes files gone from
    the repository.  Returns whether a compiled part's source changed."""
    changed = False
    for top in SOURCES:
        source = ROOT / top
        files = [source] if source.is_file() else [
            p for p in source.rglob("*") if p.is_file() and not SKIPPED & set(p.parts)
            and p.suffix != ".so"]
        wanted = set()
        for path in files:
            target = COPY / path.relative_to(ROOT)
            wanted.add(target)
            if not target.exists() or not filecmp.cmp(path, target, shallow=False):
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, target)
                changed |= top in ("csrc", "setup.py")
        if source.is_dir():
            for target in (COPY / top).rglob("*"):
                if target.is_file() and target.suffix != ".so" and target not in wanted \
                        and not SKIPPED & set(target.parts):
                    target.unlink()
    return changed


def build(py: str) -> str | None:
    """Both compiled parts, in place inside the copy; None or the log's tail."""
    env = {**os.environ, "MAX_JOBS": os.environ.get("MAX_JOBS", "2")}
    done = subprocess.run([py, "setup.py", "--quiet", "build_ext", "--inplace", "--force"],
                          cwd=COPY, capture_output=True, text=True, env=env)
    return None if done.returncode == 0 else (done.stdout + done.stderr)[-3000:]


def run_tests(py: str, tests: list, stop_first: bool) -> tuple[int, str]:
    env = {**os.environ, "PYTHONPATH": str(COPY)}
    env.pop("CUSTOMOPS_ISA", None)  # tests/test_vector_code.py sets it per child
    # -o addopts= drops the notebook options of pyproject.toml (no notebooks here).
    args = [py, "-m", "pytest", "-o", "addopts=", "-p", "no:cacheprovider", "-q",
            *(["-x"] if stop_first else []), *tests]
    try:
        done = subprocess.run(args, cwd=COPY, capture_output=True, text=True, env=env,
                              timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        return -1, f"timed out after {TIMEOUT} s"
    return done.returncode, done.stdout + done.stderr


def last_line(output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("names", nargs="*", help="mutants to run (default: all)")
    parser.add_argument("--check", action="store_true",
                        help="only check that every patch applies to the sources")
    args = parser.parse_args(argv)
    py = os.environ.get("PY", str(ROOT / ".venv" / "bin" / "python"))

    mutants = [parse(p) for p in sorted(MUTANTS.glob("*.patch"))]
    if args.names:
        wanted = {n.removesuffix(".patch") for n in args.names}
        unknown = wanted - {m.name for m in mutants}
        if unknown:
            print(f"mutants: no such mutant: {', '.join(sorted(unknown))}", file=sys.stderr)
            return 2
        by_name = {m.name: m for m in mutants}
        mutants = [by_name[n] for n in dict.fromkeys(n.removesuffix(".patch") for n in args.names)]
    stale = [f"{m.name}: {last_line(r.stderr)}" for m in mutants
             if (r := git_apply(m, ROOT, "--check")).returncode]
    if stale:
        print("mutants: patches that no longer apply:\n  " + "\n  ".join(stale), file=sys.stderr)
        return 1
    if args.check:
        print(f"mutants: all {len(mutants)} patches apply")
        return 0

    start = time.monotonic()

    def say(text):
        print(f"[mutants {time.monotonic() - start:5.0f}s] {text}", flush=True)

    COPY.mkdir(parents=True, exist_ok=True)
    if sync_copy() or DIRTY.exists() or not list(COPY.glob("customops/*.so")):
        say("building the unmutated copy")
        if (log := build(py)) is not None:
            print(f"mutants: the unmutated copy does not build:\n{log}", file=sys.stderr)
            return 1
        DIRTY.unlink(missing_ok=True)
    tests = sorted({t for m in mutants for t in m.tests})
    say(f"the unmutated copy against {len(tests)} test selections")
    status, output = run_tests(py, tests, stop_first=False)
    if status != 0:
        print(f"mutants: the tests fail without any mutant (pytest status {status}):\n"
              f"{output[-3000:]}", file=sys.stderr)
        return 1
    say(f"unmutated: {last_line(output)}")

    results = {}
    # Python mutants first: they need no build, and the C++ ones leave the
    # copy's libraries to rebuild.
    for mutant in sorted(mutants, key=lambda m: m.touches_cpp):
        applied = git_apply(mutant, COPY)
        if not applied.returncode:  # applied means undoable: never a mutant that changed nothing
            applied = git_apply(mutant, COPY, "-R", "--check")
        if applied.returncode:
            results[mutant.name] = "error"
            say(f"ERROR  {mutant.name}: does not apply to the copy: {last_line(applied.stderr)}")
            continue
        if mutant.touches_cpp:
            DIRTY.touch()
        try:
            log = build(py) if mutant.touches_cpp else None
            if log is not None:
                results[mutant.name] = "error"
                say(f"ERROR  {mutant.name}: the build fails:\n{log}")
                continue
            status, output = run_tests(py, mutant.tests, stop_first=True)
        finally:
            undone = git_apply(mutant, COPY, "-R")
            if undone.returncode:
                print(f"mutants: could not undo {mutant.name} in {COPY}; delete that directory",
                      file=sys.stderr)
                return 1
        # 1: tests failed; negative: pytest died of a signal (a crash) or timed out
        verdict = "caught" if status == 1 or status < 0 else "missed" if status == 0 else "error"
        results[mutant.name] = verdict
        say(f"{verdict.upper():6s} {mutant.name}: {mutant.summary} ({last_line(output)})")
        if verdict == "error":
            print(output[-3000:])
    if any(m.touches_cpp for m in mutants):
        say("rebuilding the unmutated copy")
        if (log := build(py)) is not None:
            print(f"mutants: the unmutated copy no longer builds:\n{log}", file=sys.stderr)
            return 1
        DIRTY.unlink()

    counts = {v: sum(r == v for r in results.values()) for v in ("caught", "missed", "error")}
    say(f"{counts['caught']} caught, {counts['missed']} missed, {counts['error']} broken "
        f"of {len(results)} mutants")
    for verdict in ("missed", "error"):
        names = [n for n, r in results.items() if r == verdict]
        if names:
            print(f"{verdict}: {' '.join(names)}")
    return 0 if counts["caught"] == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
