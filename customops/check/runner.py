"""Runs cases in child processes (child.py), so that a kernel that crashes or
hangs fails a case instead of ending the checker.

The child writes the id of the case it starts to a progress file.  When it
dies from a signal, or the progress file names the same case for longer than
the time limit, that case gets the outcome "signal" or "hang" and a new child
takes the cases after it.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

CHILD = Path(__file__).with_name("child.py")


def run_cases(cases: list, libraries: list, workdir: Path, timeout: float,
              python: str = sys.executable) -> dict:
    """Case id -> the child's record (status "ran", "refused-load" or
    "refused-run", with ORT's message), or status "signal" / "hang" / "died"."""
    workdir.mkdir(parents=True, exist_ok=True)
    results, remaining, attempt = {}, list(cases), 0
    while remaining:
        attempt += 1
        job = workdir / f"job{attempt}.json"
        paths = {k: str(workdir / f"job{attempt}.{k}") for k in ("progress", "results")}
        job.write_text(json.dumps({"libraries": [str(p) for p in libraries],
                                   "cases": remaining, "timeout": timeout, **paths}))
        stopped, stderr = _watch([str(python), str(CHILD), str(job)], paths["progress"],
                                 timeout, workdir / f"job{attempt}.stderr")
        for line in Path(paths["results"]).read_text().splitlines() if \
                Path(paths["results"]).exists() else []:
            record = json.loads(line)
            results[record["id"]] = record
        done = [c for c in remaining if c["id"] in results]
        remaining = remaining[len(done):]
        if not remaining:
            break
        # the child stopped during remaining[0]: that case is the culprit
        again = Path(paths["progress"]).exists() and \
            Path(paths["progress"]).read_text().endswith("\tagain")
        results[remaining[0]["id"]] = {"id": remaining[0]["id"], **stopped,
                                       "message": stderr, "again": again}
        remaining = remaining[1:]
    return results


def _watch(command, progress: str, timeout: float, stderr_path: Path):
    """Runs the child; returns (how it stopped, the end of its stderr)."""
    with open(stderr_path, "w") as stderr:
        child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr)
        current, since = None, time.monotonic()
        while child.poll() is None:
            time.sleep(0.02)
            try:
                now = Path(progress).read_text()
            except FileNotFoundError:
                now = None
            if now != current:
                current, since = now, time.monotonic()
            elif time.monotonic() - since > timeout:
                child.kill()
                child.wait()
                return {"status": "hang", "seconds": timeout}, ""
    text = stderr_path.read_text().strip()
    tail = text.splitlines()[-1] if text else ""
    if child.returncode < 0:
        return {"status": "signal", "signal": signal.Signals(-child.returncode).name}, tail
    return ({"status": "died", "returncode": child.returncode}, tail) if child.returncode else \
        ({"status": "ran"}, tail)


def stopped(record: dict) -> str | None:
    """How a case killed or hung its child, in words; None if it did not."""
    if record["status"] == "signal":
        return f"killed the process with {record['signal']}" + (
            " when run a second time in the session that refused it with an error"
            if record.get("again") else "")
    if record["status"] == "hang":
        return f"did not finish within {record['seconds']:g} s"
    if record["status"] == "died":
        return f"ended the process with exit status {record['returncode']} ({record['message']})"
    return None
