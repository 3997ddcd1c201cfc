"""The checks on the samples as given: reference, declared vs actual,
threads, determinism.

Each sample runs in a child process (one session per sample model), then
once more in the same session and once in a fresh one; one more case runs
all samples of a model from several threads on one session.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from ..doctor.probe import first_line, type_name

from .record import record
from .runner import stopped
from .target import bare, grown, input_dim_names, row_count


# Rounds go on for this long at least: a race on small inputs shows in few
# calls of thousands (scale_add's member scratch on 5 rows: measured in docs/check.md).
THREADS_SECONDS = 1.0
# ... and on, a thread more each THREADS_SECONDS, until this many calls of
# each sample (or calls lasting THREADS_TOGETHER_SECONDS in all: a large
# sample's calls are few) overlapped another thread's call for half their
# time, or for THREADS_LIMIT seconds (at most half the time limit of a case).  On a busy
# machine the threads take turns and a race hides: fewer is no pass (rates
# quiet and busy in docs/check.md).
THREADS_TOGETHER = 1000
THREADS_TOGETHER_SECONDS = 1.0
THREADS_LIMIT = 30.0
# A sample of fewer input elements also runs grown to about this many (its
# rows resampled as the larger check does): in a small call the racy code is
# a sliver of ORT's work, and two calls at once rarely run it at the same
# moment (a member scratch on 5 rows: 3 of 10 runs caught; on 40 rows: 5 of 5).
THREADS_ELEMENTS = 10_000


def cases(target, threads: int, calls: int) -> list:
    found, by_model = [], {}
    for i, sample in enumerate(target.samples):
        model = target.write_model(target.sample_model(sample))
        feeds = target.write_feeds(sample.arrays)
        by_model.setdefault(model, []).append((i, sample))
        for kind, run in (("run", "first"), ("run", "again"), ("fresh", "fresh")):
            found.append({"id": f"{run}:{i}", "kind": kind, "model": model, "feeds": [feeds],
                          "out": str(target.workdir / f"{run}{i}.npz")})
        # the same node with nothing declared about its outputs: the shape function alone
        found.append({"id": f"bare:{i}", "kind": "fresh", "out": None, "feeds": [feeds],
                      "model": target.write_model(bare(target.sample_model(sample)))})
    for j, (model, samples) in enumerate(by_model.items()):
        found.append(threads_case(target, f"threads:{j}", model, samples, threads, calls))
    return found


def threads_case(target, cid, model, samples, threads, calls):
    """Thread t's call c runs sample c (round the samples, then the small
    ones grown) in copy t: each
    thread its own values, all of one shape at a time, so that a kernel whose
    calls share memory writes different values into it at once (with one
    input for all, a race writes the same values and never shows)."""
    feeds, labels, groups = [], [], []
    runs = [(sample.name, sample.arrays) for _, sample in samples] + \
        [grown_for_threads(target, sample) for _, sample in samples]
    runs = [run for run in runs if run]
    for name, arrays in runs:
        for t in range(threads):
            feeds.append(arrays if t == 0 else perturbed(arrays, t))
            labels.append(f"sample {name}" + (f" (copy {t})" if t else ""))
            groups.append(name)
    rounds = max(calls, len(runs))  # every run at least once, the grown ones too
    schedule = [[(c % len(runs)) * threads + t for c in range(rounds)] for t in range(threads)]
    return {"id": cid, "kind": "threads", "model": model, "labels": labels,
            "feeds": [target.write_feeds(f) for f in feeds], "schedule": schedule,
            "seconds": THREADS_SECONDS, "limit": THREADS_LIMIT, "groups": groups,
            "enough": THREADS_TOGETHER, "enough_seconds": THREADS_TOGETHER_SECONDS}


def grown_for_threads(target, sample):
    """(name, arrays) of the sample grown to THREADS_ELEMENTS input
    elements, or None: it has that many already, or no rows to grow."""
    places, size = target.rows_of(sample), sum(a.size for a in sample.arrays.values())
    rows = row_count(sample.arrays, places)
    if not rows or not size or size >= THREADS_ELEMENTS:
        return None
    factor = -(-THREADS_ELEMENTS // size)
    return f"{sample.name} grown to {rows * factor} rows", grown(sample.arrays, places, factor, 0)


def perturbed(arrays: dict, seed: int) -> dict:
    """The arrays with each float array's values shuffled (same shape, same
    values, other places); other dtypes, whose values may be indices or
    counts, kept."""
    rng = np.random.default_rng(seed)
    return {k: rng.permutation(a.ravel()).reshape(a.shape) if a.dtype.kind in "fc" else a
            for k, a in arrays.items()}


def outputs(target, results, run: str, i: int):
    """The outputs of sample i's run, or the reason there are none."""
    done = results[f"{run}:{i}"]
    sample = target.samples[i].name
    if done["status"] != "ran":
        return None, f"sample {sample}: {stopped(done) or 'the run failed: ' + line(done)}"
    with np.load(target.workdir / f"{run}{i}.npz") as data:
        return [data[k] for k in target.output_names], None


def line(done) -> str:
    return first_line(done.get("message", ""))


def check_reference(target, results):
    if target.reference is None:
        return record("reference", None, "not run: no reference given (--reference FILE.py:FUNCTION)")
    for i, sample in enumerate(target.samples):
        got, problem = outputs(target, results, "first", i)
        if problem:
            return record("reference", False, problem)
        problem = compare(got, target.expected_outputs[i], target.output_names, target.rtol,
                          target.atol)
        if problem:
            return record("reference", False, f"sample {sample.name}, {problem}")
    return record("reference", True, f"{len(target.samples)} samples equal the reference "
                  f"(rtol={target.rtol:g}, atol={target.atol:g})")


def compare(got, expected, names, rtol, atol) -> str | None:
    """What differs between two lists of outputs, or None."""
    if len(got) != len(expected):
        return f"the reference returned {len(expected)} outputs, the model has {len(got)}"
    for name, g, e in zip(names, got, map(np.asarray, expected)):
        if g.dtype.kind in "UO" and e.dtype.kind in "UO":  # strings, compared as strings
            g, e = g.astype(str), e.astype(str)
            if g.shape != e.shape:
                return f"output {name}: got string{list(g.shape)}, the reference string" \
                       f"{list(e.shape)}"
        elif g.dtype != e.dtype or g.shape != e.shape:
            return (f"output {name}: got {g.dtype}{list(g.shape)}, the reference "
                    f"{e.dtype}{list(e.shape)}")
        if g.dtype.kind in "fc":
            close = np.isclose(g, e, rtol=rtol, atol=atol, equal_nan=True)
        else:
            close = g == e
        if not close.all():
            where = tuple(int(i) for i in np.argwhere(~close)[0])
            return (f"output {name}: {int((~close).sum())} of {g.size} values differ "
                    f"(first at {list(where)}: {g[where]} instead of {e[where]})")
    return None


def declared_dims(value_info):
    """The model's declaration of an output: (type text, dims or None)."""
    tensor = value_info.type.tensor_type
    elem = onnx.TensorProto.DataType.Name(tensor.elem_type).lower() if tensor.elem_type else None
    dims = None
    if tensor.HasField("shape"):
        dims = [d.dim_value if d.HasField("dim_value") else d.dim_param or None
                for d in tensor.shape.dim]
    return elem and f"tensor({elem})", dims


def check_declared(target, results):
    model = {o.name: declared_dims(o) for o in target.model.graph.output}
    for i, sample in enumerate(target.samples):
        got, problem = outputs(target, results, "first", i)
        if problem:
            return record("declared", False, problem)
        for (name, ort_type, shape), array in zip(results[f"first:{i}"]["declared"], got):
            problem = disagreement(name, model.get(name, (None, None)), ort_type, shape, array)
            if problem:
                return record("declared", False, f"sample {sample.name}: {problem}")
        done = results[f"bare:{i}"]
        if done["status"] == "refused-load" or stopped(done):
            return record("declared", False, f"sample {sample.name}, the node with its outputs "
                          f"undeclared: {stopped(done) or 'the session refused: ' + line(done)}")
        names = input_dim_names(target.sample_model(sample))
        for name, ort_type, shape in done["declared"]:
            gap = left_out(model.get(name, (None, None)), ort_type, shape, names)
            if gap:
                said = f"{ort_type} {shape}" if shape else f"{ort_type} and no shape"
                return record("declared", False, f"sample {sample.name}: output {name}: with "
                              f"nothing declared about the outputs, the library's shape function "
                              f"declares {said}: it leaves out {'; '.join(gap)}")
    return record("declared", True, "each output's type and shape, as the session declares them "
                  "(with the model's output declarations and without them: the shape function "
                  "alone), agree with the model's declaration and with the arrays returned")


def left_out(model, ort_type, shape, input_names) -> list:
    """What the model declares of an output that the shape function alone does
    not: the type, the rank, a static size, a named dimension of the inputs (a
    name of the model's own, unknown to the node, is not asked for)."""
    model_type, model_dims = model
    gap = [f"the type {model_type}"] if model_type and ort_type != model_type else []
    if model_dims is None:
        return gap
    if len(shape or []) != len(model_dims):
        return gap + [f"the rank {len(model_dims)} (the model declares {model_dims})"]
    for k, (want, got) in enumerate(zip(model_dims, shape)):
        asked = isinstance(want, int) or (isinstance(want, str) and want in input_names)
        if asked and got != want:
            what = "size" if isinstance(want, int) else "named dimension"
            gap.append(f"dimension {k}'s {what} {want!r} (it gives {got!r})")
    return gap


def disagreement(name, model, ort_type, shape, array) -> str | None:
    model_type, model_dims = model
    actual = type_name(helper.np_dtype_to_tensor_dtype(array.dtype))
    if model_type and ort_type != model_type:
        return f"output {name}: the model declares {model_type}, the session {ort_type}"
    if ort_type != actual:
        return f"output {name}: the session declares {ort_type}, the run returns {actual}"
    if model_dims is not None and len(model_dims) and not shape:
        return (f"output {name}: the model declares the shape {model_dims}, the session no shape "
                f"(the library's shape inference dropped it, e.g. a wrong rank)")
    if model_dims is not None and shape is not None and len(model_dims) != len(shape):
        return f"output {name}: the model declares rank {len(model_dims)}, the session {shape}"
    for k, want in enumerate(model_dims or []):
        if want is not None and shape[k] != want:
            return (f"output {name}: dimension {k} is {want!r} in the model, {shape[k]!r} "
                    f"in the session (shape {shape})")
    if shape and len(shape) != array.ndim:
        return f"output {name}: the session declares {shape}, the run returns {list(array.shape)}"
    for k, size in enumerate(shape or []):
        if isinstance(size, int) and size >= 0 and size != array.shape[k]:
            return (f"output {name}: the session declares {shape}, the run returns "
                    f"{list(array.shape)}")
    return None


def check_threads(target, results, threads: int, calls: int):
    together = []  # (overlap figures, sample, calls, calls overlapped, their seconds)
    for j in range(len([k for k in results if k.startswith("threads:")])):
        done = results[f"threads:{j}"]
        if done["status"] != "ran":
            return record("threads", False, f"{threads} threads on one session: "
                          f"{stopped(done) or 'the session failed: ' + line(done)}")
        if done["mismatches"]:
            inputs = sorted({m.split(", output")[0] for m in done["mismatches"]})
            return record("threads", False, f"{threads} threads on one session: "
                          f"{len(done['mismatches'])} calls differ from the serial run, on "
                          f"{'; '.join(inputs)} (first: {done['mismatches'][0]})")
        together += [(done["overlap"], name, n, at_once, took)
                     for name, (n, at_once, took) in done["overlap"]["samples"].items() if n]
    if not together:  # the session refused every sample (the other checks say so)
        return record("threads", None, "not run: the session refuses every sample")
    short = [o for o in together if o[3] < THREADS_TOGETHER and o[4] < THREADS_TOGETHER_SECONDS]
    overlap, name, n, at_once, took = min(short or together, key=lambda o: o[3])
    how = (f"in {overlap['seconds']:g} s with up to {overlap['threads']} threads, {at_once} of "
           f"{n} calls on sample {name} (the fewest), {took:g} s of calls, overlapped another "
           "thread's call for half their time")
    if short:
        return record("threads", False, f"not established: {how} ({THREADS_TOGETHER} needed, "
                      f"or {THREADS_TOGETHER_SECONDS:g} s of calls): "
                      "the threads mostly took turns (a busy machine?), and a race shows only "
                      "while calls overlap; run the check again on a quieter machine")
    return record("threads", True, f"{threads} threads sharing one session, each on its own "
                  f"copy of the samples (values shuffled), give the serial run's bits; {how}")


def check_determinism(target, results):
    for i, sample in enumerate(target.samples):
        first, problem = outputs(target, results, "first", i)
        for run in ("again", "fresh"):
            other, problem = (first, problem) if problem else outputs(target, results, run, i)
            if problem:
                return record("determinism", False, problem)
            for name, a, b in zip(target.output_names, first, other):
                if a.shape != b.shape or a.tobytes() != b.tobytes():
                    where = "a second run in the same session" if run == "again" else \
                        "a fresh session"
                    return record("determinism", False, f"sample {sample.name}, output {name}: "
                                  f"{where} gives other bits")
    return record("determinism", True, "each sample gives the same bits twice in one session "
                  "and in a fresh session")
