"""The `threads` check's measure of how many calls ran at once (issue 49).

A race shows only while two calls run at the same time; on a busy machine
the threads take turns and a race hides.  The child keeps each call's start
and end, counts the calls that overlapped another thread's call for half
their time, goes on (more time, one thread more) until enough did, and says
"not established" (ok False, never PASS) when too few did.  A small sample
also runs grown: in a small call the racy code is a sliver.  Rates quiet and
busy: docs/check.md.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest

from customops import check
from customops.check import child, valid
from test_check import SOURCE, build, scale_add_model


@pytest.fixture(scope="module")
def scale_add(tmp_path_factory):
    """The correct scale_add and the one whose kernel keeps its scratch in a
    member (a race), the model, a sample of 5 rows and one of 2,000."""
    folder = tmp_path_factory.mktemp("threads")
    onnx.save(scale_add_model(["u0", 16]), folder / "scale_add.onnx")
    rng = np.random.default_rng(49)
    samples = {rows: {k: rng.standard_normal((rows, 16), dtype=np.float32) for k in "xy"}
               for rows in (5, 2000)}
    return {"model": folder / "scale_add.onnx", "samples": samples,
            "": build(SOURCE, folder / "libscale_add.so"),
            "race": build(SOURCE, folder / "libscale_add_race.so", "BUG_MEMBER_SCRATCH")}


def spans(*calls):
    """One thread's calls as the child keeps them: (start, end, feed)."""
    return [(begin, end, 0) for begin, end in calls]


def test_together_counts_calls_that_overlapped_for_half_their_time():
    """Calls that overlap another thread's for half their time count; calls
    one after the other (threads taking turns) do not, nor does a brief
    overlap, nor a thread's own calls."""
    ran = list(child.together([spans((0, 10), (20, 30)), spans((1, 11), (30, 40))]))
    assert [t for _, t, _ in ran] == [True, False, True, False]
    brief = list(child.together([spans((0, 10)), spans((6, 16))]))
    assert [t for _, t, _ in brief] == [False, False]
    # a third thread's call that overlaps counts even when the second's does not
    ran = list(child.together([spans((0, 10)), spans((10, 20)), spans((2, 12))]))
    assert [t for _, t, _ in ran] == [True, False, True]
    alone = list(child.together([spans((0, 10), (10, 20))]))
    assert [t for _, t, _ in alone] == [False, False]


def session(library, model):
    options = onnxruntime.SessionOptions()
    options.register_custom_ops_library(str(library))
    return onnxruntime.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])


def verdict(overlap):
    done = {"status": "ran", "mismatches": [], "overlap": overlap}
    return valid.check_threads(None, {"threads:0": done}, threads=1, calls=8)


def test_one_thread_is_not_established(scale_add):
    """One thread's calls never overlap: none counted, and no pass, whatever
    the library; enough overlapped calls of every sample pass."""
    sess = session(scale_add[""], scale_add["model"])
    found, overlap = child.threads(sess, [scale_add["samples"][2000]], ["a"], [[0]], seconds=0.2,
                                   limit=0.3, groups=["s"], enough=1, enough_seconds=0.01)
    assert found == [] and overlap["threads"] == 1 and overlap["samples"]["s"][1] == 0, overlap
    record = verdict(overlap)
    assert record["ok"] is False, record
    assert record["detail"].startswith("not established: in ") and \
        " 0 of " in record["detail"] and f"({valid.THREADS_TOGETHER} needed, or " in \
        record["detail"], record
    enough = valid.THREADS_TOGETHER
    record = verdict({"threads": 4, "seconds": 1.0, "samples": {"a": [9000, enough, 0.1],
                                                                 "b": [0, 0, 0.0]}})
    assert record["ok"] is True and f"{enough} of 9000 calls on sample a" in record["detail"]
    record = verdict({"threads": 4, "seconds": 1.0, "samples": {"a": [9000, enough, 0.1],
                                                                 "b": [9000, enough - 1, 0.1]}})
    assert record["ok"] is False and f"{enough - 1} of 9000 calls on sample b" in record["detail"]
    # a large sample's calls are few and long: a second of them overlapped is enough
    record = verdict({"threads": 4, "seconds": 1.0, "samples": {"a": [600, 450, 4.5]}})
    assert record["ok"] is True, record


def test_keeps_going_with_a_thread_more_until_its_limit(scale_add):
    """While too few calls ran at once: another round of seconds with one
    thread more, up to twice as many, until the limit."""
    sess = session(scale_add[""], scale_add["model"])
    feeds = [scale_add["samples"][5]] * 2
    found, overlap = child.threads(sess, feeds, ["a", "b"], [[0], [1]], seconds=0.2, limit=1.2,
                                   groups=["s", "s"], enough=10**9, enough_seconds=10**9)
    assert found == [] and overlap["threads"] == 4 and 1.0 <= overlap["seconds"] < 2, overlap
    calls, together, took = overlap["samples"]["s"]
    assert calls > together >= 0 and took >= 0


def test_a_small_sample_also_runs_grown(scale_add):
    """5 rows of x and y (160 elements) also run as 315 rows (the rows
    resampled); 2,000 rows (64,000 elements) run as given."""
    target = check.target.read(scale_add["model"], [scale_add[""]],
                               list(scale_add["samples"].values()), None, 1e-5, 1e-6,
                               scale_add["model"].parent)
    small, large = target.samples
    name, arrays = valid.grown_for_threads(target, small)
    assert name == f"{small.name} grown to 315 rows", name
    assert {k: a.shape for k, a in arrays.items()} == {"x": (315, 16), "y": (315, 16)}
    assert valid.grown_for_threads(target, large) is None


def test_every_sample_and_grown_copy_is_scheduled(scale_add):
    """Five small samples and their five grown copies are ten runs, more than
    the eight calls a thread makes by default: each still gets its round."""
    samples = [scale_add["samples"][5]] * 5
    target = check.target.read(scale_add["model"], [scale_add[""]], samples, None, 1e-5, 1e-6,
                               scale_add["model"].parent)
    case = valid.threads_case(target, "threads:0", "m.onnx", list(enumerate(target.samples)),
                              threads=2, calls=8)
    scheduled = {case["groups"][i] for calls in case["schedule"] for i in calls}
    assert len(scheduled) == 10 and scheduled == set(case["groups"]), scheduled


def test_a_race_on_a_small_sample_alone_never_passes(scale_add):
    """The member-scratch race on 5 rows alone: 7 of 10 runs passed while
    only the sample ran (docs/check.md); with its grown copy, never PASS."""
    (record,) = check.run(scale_add["model"], [scale_add["race"]], [scale_add["samples"][5]],
                          checks=["threads"])
    assert_race_found(record)


def test_a_race_never_passes(scale_add):
    """The member-scratch race on samples of 5 and 2,000 rows: caught, or not
    established when the machine kept the threads apart; never PASS."""
    (record,) = check.run(scale_add["model"], [scale_add["race"]],
                          list(scale_add["samples"].values()), checks=["threads"])
    assert_race_found(record)


def assert_race_found(record):
    """Calls that differ, or racing calls that corrupted the heap (SIGABRT in
    4 of 20 busy runs, docs/check.md), or not established: a FAIL, never PASS."""
    assert record["ok"] is False, record
    assert "calls differ from the serial run" in record["detail"] or \
        "killed the process with" in record["detail"] or \
        record["detail"].startswith("not established: "), record
