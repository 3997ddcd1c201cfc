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
   "out": npz path or null, "labels": [text per feed], "schedule": [[feed index per call]
   per thread], "seconds": float, "limit": float, "groups": [group name per feed],
   "enough": int, "enough_seconds": float}], "timeout": seconds a case may take}
"run" uses the session of its model made by an earlier case, if any (so a
second "run" is the same session twice); "fresh" always makes a new one.  A
case marked "twice" that the library refuses runs once more in the same
session (the progress file then names it with a tab and "again"): an error
path that leaves bad state shows (onnxruntime-extensions' Inverse: dlib
aborts the process at its second fatal error).
"""

import json
import sys
import threading
import time

import numpy as np
import onnxruntime

SESSIONS = {}
AGAIN = "\tagain"  # in the progress file: a refused case running a second time


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


def loadable(array):
    """A string tensor comes back as an object array of str: as numpy
    strings, so that np.load reads it without pickle."""
    array = np.asarray(array)
    return array.astype(str) if array.dtype == object else array


def same(got, expected) -> bool:
    """Bit for bit; strings (object arrays, whose bytes are pointers) by value."""
    got, expected = loadable(got), loadable(expected)
    return got.shape == expected.shape and got.dtype == expected.dtype and \
        got.tobytes() == expected.tobytes()


def summary(names, outputs):
    """Name, dtype, shape and whether it holds a non-finite value, per output."""
    return [[name, str(np.asarray(a).dtype), list(np.shape(a)),
             bool(np.asarray(a).dtype.kind in "fc" and not np.isfinite(a).all())]
            for name, a in zip(names, outputs)]


def threads(sess, feeds, labels, schedule, seconds, limit, groups, enough, enough_seconds):
    """Round c: thread t runs feeds[schedule[t][c]] again and again for
    BURST seconds, all threads starting together; rounds go round the
    schedule until ``seconds`` have passed (a race on a small input shows in
    few calls of thousands).  Then, while fewer than ``enough`` calls of some
    group of feeds (a sample's copies), lasting less than ``enough_seconds``
    in all, overlapped another thread's call for half their time (on a busy
    machine the threads take turns, and a race
    hides), another ``seconds`` with one thread more (up to twice as many,
    the extra ones on the first ones' feeds), until ``limit`` seconds.
    Returns the mismatches with the serial results, as text, and per group
    [calls, calls overlapped, their seconds].  A feed the serial run refuses is left out."""
    expected = {}
    for i, feed in enumerate(feeds):
        try:
            expected[i] = sess.run(None, feed)
        except Exception:  # noqa: BLE001  refused alone too: nothing to compare with
            pass
    schedule = [[i for i in calls if i in expected] for calls in schedule]
    rounds = min(len(calls) for calls in schedule)
    found, counts = [], {group: [0, 0, 0.0] for group in groups}
    began, count = time.monotonic(), len(schedule)
    while rounds:
        spans = phase(sess, feeds, labels, expected, [schedule[t % len(schedule)] for t in
                                                       range(count)], rounds, seconds, found,
                      began + limit)
        for feed, ran_together, took in together(spans):
            counts[groups[feed]][0] += 1
            counts[groups[feed]][1] += int(ran_together)
            counts[groups[feed]][2] += took * ran_together
        if found or time.monotonic() - began + seconds > limit or \
                all(lapped >= enough or took >= enough_seconds
                    for calls, lapped, took in counts.values() if calls):
            break
        count = min(count + 1, 2 * len(schedule))
    return found, {"threads": count, "seconds": round(time.monotonic() - began, 2),
                   "samples": {g: [calls, lapped, round(took, 3)]
                               for g, (calls, lapped, took) in counts.items()}}


BURST = 0.005  # seconds a round lasts: threads that call freely overlap, in lockstep they stagger


def phase(sess, feeds, labels, expected, schedule, rounds, seconds, found, deadline):
    """Rounds for ``seconds`` (a whole number of times round the schedule),
    stopped at ``deadline`` whatever (on a loaded machine a round of many
    threads can take long); per thread, its calls: (start, end, feed)."""
    state = {"round": 0, "until": None, "stop": False, "burst": None}
    spans = [[] for _ in schedule]

    def next_round():  # one thread runs it while all wait: they all stop together
        now = time.monotonic()
        if state["until"] is None:
            state["until"] = now + seconds
        state["round"] += 1
        state["burst"] = now + BURST
        done = state["round"] - 1
        state["stop"] = done >= rounds and done % rounds == 0 and now >= state["until"] \
            or now >= deadline

    start = threading.Barrier(len(schedule), action=next_round)

    def worker(t):
        while True:
            try:
                start.wait()
            except threading.BrokenBarrierError:  # another thread stopped
                return
            if state["stop"]:
                return
            call = state["round"] - 1
            i = schedule[t][call % rounds]
            ended = 0.0
            while ended < state["burst"]:
                try:
                    began = time.monotonic()
                    got = sess.run(None, feeds[i])
                    ended = time.monotonic()
                except Exception as error:  # noqa: BLE001  reported to the parent
                    found.append(f"{labels[i]} raised in thread {t}: "
                                 f"{str(error).splitlines()[0]}")
                    start.abort()
                    return
                spans[t].append((began, ended, i))
                for g, e, out in zip(got, expected[i], sess.get_outputs()):
                    if not same(g, e):
                        found.append(f"{labels[i]}, output {out.name}, thread {t}, call {call}")

    workers = [threading.Thread(target=worker, args=(t,)) for t in range(len(schedule))]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return spans


def together(spans):
    """(feed, whether the call overlapped a call of another thread for at
    least half its time, its duration) per call.  A thread's calls follow one another, so
    the calls of another thread that overlap one most are the two around its
    start."""
    calls = [np.array(s, dtype=float).reshape(-1, 3) for s in spans]
    for a, mine in enumerate(calls):
        begin, end = mine[:, 0], mine[:, 1]
        best = np.zeros(len(mine))
        for b, theirs in enumerate(calls):
            if b == a or not len(theirs):
                continue
            at = np.searchsorted(theirs[:, 0], begin) - 1
            for j in (np.clip(at, 0, len(theirs) - 1), np.clip(at + 1, 0, len(theirs) - 1)):
                shared = np.minimum(end, theirs[j, 1]) - np.maximum(begin, theirs[j, 0])
                best = np.maximum(best, shared)
        yield from zip(mine[:, 2].astype(int), best >= (end - begin) / 2, end - begin)


def run_case(job, case, mark):
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
            mismatches, overlap = threads(sess, feeds, case["labels"], case["schedule"],
                                          case["seconds"], min(case["limit"], job["timeout"] / 2),
                                          case["groups"], case["enough"], case["enough_seconds"])
            return {**record, "status": "ran", "mismatches": mismatches, "overlap": overlap}
        began = time.monotonic()
        outputs = sess.run(None, feeds[0])
        record["seconds"] = time.monotonic() - began
    except Exception as error:  # noqa: BLE001
        if case.get("twice"):  # an error path that leaves bad state shows on the next call
            mark(case["id"] + AGAIN)
            try:
                sess.run(None, feeds[0])
            except Exception:  # noqa: BLE001  refused again: the answer expected
                pass
        return {**record, "status": "refused-run", "message": str(error)}
    if case.get("out"):
        np.savez(case["out"], **{n: loadable(o) for n, o in zip(names, outputs)})
    return {**record, "status": "ran", "outputs": summary(names, outputs)}


def main():
    with open(sys.argv[1]) as f:
        job = json.load(f)
    with open(job["results"], "a") as results:
        def mark(text):
            with open(job["progress"], "w") as progress:
                progress.write(text)

        for case in job["cases"]:
            mark(case["id"])
            results.write(json.dumps(run_case(job, case, mark)) + "\n")
            results.flush()


if __name__ == "__main__":
    main()
