"""The child process of customops.check: runs a list of cases against the
library and writes what happened, one JSON line per case.

    python child.py JOB.json

A standalone script on purpose: it imports only onnxruntime, numpy and the
standard library, so that the venvs of other onnxruntime releases (which
hold nothing else) run it too.  The parent (runner.py) reads the progress
file after a crash or a hang to name the case that was running, and starts
a new child for the cases after it.

A job: {"libraries": [paths], "progress": path, "results": path, "cases": [
  {"id", "kind": "run" | "fresh" | "threads", "model": path, "feeds": [npz paths],
   "out": npz path or null, "threads": int, "calls": int}]}
"run" uses the session of its model made by an earlier case, if any (so a
second "run" is the same session twice); "fresh" always makes a new one.
"""

import json
import sys
import threading

import numpy as np
import onnxruntime

SESSIONS = {}


def session(job, model, fresh=False):
    if fresh or model not in SESSIONS:
        options = onnxruntime.SessionOptions()
        options.log_severity_level = 4  # refusals come back as exceptions; keep stderr quiet
        for library in job["libraries"]:
            options.register_custom_ops_library(library)
        SESSIONS[model] = onnxruntime.InferenceSession(model, options,
                                                       providers=["CPUExecutionProvider"])
    return SESSIONS[model]


def described(values):
    return [[v.name, v.type, v.shape if isinstance(v.shape, list) else None] for v in values]


def summary(names, outputs):
    """Name, dtype, shape and whether it holds a non-finite value, per output."""
    return [[name, str(np.asarray(a).dtype), list(np.shape(a)),
             bool(np.asarray(a).dtype.kind in "fc" and not np.isfinite(a).all())]
            for name, a in zip(names, outputs)]


def threads(sess, feeds, count, calls):
    """Each thread makes ``calls`` runs, going round the samples from a
    different start (so that different inputs run at once); returns the
    mismatches with the serial results, as text."""
    expected = [sess.run(None, f) for f in feeds]
    start, found = threading.Barrier(count), []

    def worker(t):
        start.wait()
        for call in range(calls):
            i = (t + call) % len(feeds)
            try:
                got = sess.run(None, feeds[i])
            except Exception as error:  # noqa: BLE001  reported to the parent
                found.append(f"sample {i} raised in thread {t}: {str(error).splitlines()[0]}")
                return
            for g, e, out in zip(got, expected[i], sess.get_outputs()):
                if g.shape != e.shape or g.tobytes() != e.tobytes():
                    found.append(f"sample {i}, output {out.name}, thread {t}, call {call}")

    workers = [threading.Thread(target=worker, args=(t,)) for t in range(count)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return found


def run_case(job, case):
    record = {"id": case["id"], "runtime": onnxruntime.__version__}
    try:
        sess = session(job, case["model"], fresh=case["kind"] == "fresh")
    except Exception as error:  # noqa: BLE001  a refusal is an answer
        return {**record, "status": "refused-load", "message": str(error)}
    names = [o.name for o in sess.get_outputs()]
    record["declared"] = described(sess.get_outputs())
    feeds = [dict(np.load(path)) for path in case["feeds"]]
    try:
        if case["kind"] == "threads":
            return {**record, "status": "ran",
                    "mismatches": threads(sess, feeds, case["threads"], case["calls"])}
        outputs = sess.run(None, feeds[0])
    except Exception as error:  # noqa: BLE001
        return {**record, "status": "refused-run", "message": str(error)}
    if case.get("out"):
        np.savez(case["out"], **dict(zip(names, outputs)))
    return {**record, "status": "ran", "outputs": summary(names, outputs)}


def main():
    with open(sys.argv[1]) as f:
        job = json.load(f)
    with open(job["results"], "a") as results:
        for case in job["cases"]:
            with open(job["progress"], "w") as progress:
                progress.write(case["id"])
            results.write(json.dumps(run_case(job, case)) + "\n")
            results.flush()


if __name__ == "__main__":
    main()
