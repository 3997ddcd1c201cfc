"""Fuzzing the ONNX Runtime kernels with hypothesis, in a subprocess.

tests/fuzz_ort.py throws random valid and invalid shapes, dtypes, offsets and
attribute values at each ORT kernel: valid draws must match the references,
invalid ones must raise, and none may kill the process.  It runs in a child
process so that a crash (a signal: negative return code) fails this test with
the child's output and the example that was running, instead of ending the
pytest session.

The draws are derandomized, so CI sees the same examples on every run.  The
number of examples per op is FUZZ_EXAMPLES (environment, default below, sized
to keep the whole fuzz within about a minute on a 2-core machine).
"""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import customops

HERE = Path(__file__).parent
SCRIPT = HERE / "fuzz_ort.py"
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "300"))
TIMEOUT = 600


def child_env():
    """The child imports the same customops as this process (the build under
    test, e.g. the sanitized copy of `make sanitize`), and keeps LD_PRELOAD and
    the sanitizer options it inherits."""
    env = dict(os.environ)
    package_root = str(Path(customops.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def run_child(args, tmp_path):
    last = tmp_path / "last_example.txt"
    done = subprocess.run([sys.executable, str(SCRIPT), "--last-example", str(last), *args],
                          capture_output=True, text=True, env=child_env(), timeout=TIMEOUT,
                          check=False)
    return done, (last.read_text() if last.exists() else "(none)")


def explain(done, last):
    code = done.returncode
    if code < 0:
        what = f"killed by signal {signal.Signals(-code).name} (a crash)"
    else:
        what = f"exit status {code}"
    return (f"fuzz_ort.py: {what}\nexample running: {last}\n"
            f"--- stdout ---\n{done.stdout[-8000:]}\n--- stderr ---\n{done.stderr[-8000:]}")


def test_ort_kernels_survive_fuzzing(tmp_path, capsys):
    done, last = run_child(["--examples", str(EXAMPLES)], tmp_path)
    assert done.returncode == 0, explain(done, last)
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    lines = [line for line in done.stdout.splitlines() if line.startswith("fuzz ")]
    total = sum(sum(c.values()) for c in summary["counts"].values())
    with capsys.disabled():
        print("\n" + "\n".join(lines) + f"\nfuzz: {total} examples in all")
    for op, counts in summary["counts"].items():
        # every op saw valid and invalid draws, as many as asked for
        assert sum(counts.values()) == EXAMPLES, (op, counts)
        assert counts.get("valid", 0) >= EXAMPLES // 4, (op, counts)
        assert sum(v for k, v in counts.items() if k.startswith("invalid")) >= EXAMPLES // 8


def test_a_crash_in_the_child_fails_with_its_output(tmp_path):
    """The harness itself: a child that dies of a signal is reported as a crash."""
    crash = tmp_path / "crash.py"
    crash.write_text("import os, sys\nprint('about to crash', flush=True)\nos.abort()\n")
    done = subprocess.run([sys.executable, str(crash)], capture_output=True, text=True,
                          check=False)
    assert done.returncode == -signal.SIGABRT
    report = explain(done, "x")
    assert "killed by signal SIGABRT (a crash)" in report and "about to crash" in report
