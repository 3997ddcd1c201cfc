"""The checks that explore what the user's samples do not: other attribute
values (attributes), integer ids with gaps, empty groups, one group, a group
per row (indices), grown copies of the samples and the op's other float
types (larger).

Each is a list of probes: a model variant and arrays, run in a child process
(runner.py) and judged against the reference (or, for another float type,
against the op's widest float type on the same values).  A refusal is
reported, not failed; a signal, a hang or a wrong result fails, and is
shrunk and written as a case the user replays alone (shrink.py).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper

from .record import record
from .runner import run_cases, stopped
from .target import (accepted, attribute_value, bare, copy, custom_nodes, grown, row_count,
                     with_input_type)
from .valid import compare, line

FLOATS = [np.float16, np.float32, np.float64]
GROWTH = (8, 64, 512)  # grown copies: this many times the sample's rows, within the budget
# ... one factor after the other, and a sample grows on only while its slowest run at the
# last factor (the op's, in its child, or the reference's) took less than this: the next
# is 8 times the rows, and an op or a reference quadratic in them (farthest point
# sampling) would take minutes.
GROW_SECONDS = 0.5
SEED = 49  # one resampling per sample and factor: a verdict does not depend on the run


@dataclass
class Probe:
    check: str             # attributes, indices, larger
    label: str             # what it varies, in words
    model: onnx.ModelProto
    arrays: dict
    attributes: dict       # what the reference is given
    places: list           # [(input, axis)] of the rows the shrinker may drop
    wide: np.dtype | None = None  # compare with this float type's run instead of the reference
    sample: str = ""
    varied: str | None = None  # the attribute changed: judged only if the reference takes it
    wide_probe: "Probe | None" = None  # that run, on the same values
    outcome: dict = field(default_factory=dict)  # kind: ran, refused, failed; text
    seconds: float = 0.0   # its slowest run: the op's, the wider type's or the reference's

    def rows(self) -> int:
        return row_count(self.arrays, self.places)

    def take(self, rows) -> "Probe":
        """The probe on these rows (indices along its places) only."""
        arrays = dict(self.arrays)
        for name, axis in self.places:
            if name in arrays:
                arrays[name] = np.take(arrays[name], rows, axis=axis)
        return Probe(self.check, self.label, self.model, arrays, self.attributes, self.places,
                     self.wide, self.sample, self.varied,
                     self.wide_probe and self.wide_probe.take(rows))


# --- attributes ---------------------------------------------------------------------------

def other_values(attribute) -> list:
    """Other values of the attribute's type: an INT at 0, 1, ±1 around it, -1; a
    FLOAT at 0, 1, twice it, a negative; a list shorter and longer; another string."""
    value = helper.get_attribute_value(attribute)
    kind = attribute.type
    A = onnx.AttributeProto
    if kind == A.INT:
        found = [0, 1, value + 1, value - 1, -1]
    elif kind == A.FLOAT:
        found = [0.0, 1.0, 2 * value, -abs(value) if value else -1.0]
    elif kind == A.STRING:
        found = [b"", value + b"_other" if value else b"other"]
    elif kind in (A.INTS, A.FLOATS):
        one = value[-1] if value else (1 if kind == A.INTS else 1.0)
        found = [list(value[:-1])] if value else []
        found.append([*value, one])
    else:
        return []
    unique = []
    for v in found:
        if v != value and v not in unique:
            unique.append(v)
    return unique


def shown(value) -> str:
    if isinstance(value, bytes):
        return repr(value.decode("utf-8", "replace"))
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def attribute_probes(target) -> list:
    found = []
    for sample in target.samples:
        base = bare(target.sample_model(sample))
        nodes = custom_nodes(base)
        for n, node in enumerate(nodes):
            for a, attribute in enumerate(node.attribute):
                for value in other_values(attribute):
                    model = copy(base)
                    changed = custom_nodes(model)[n].attribute[a]
                    changed.CopyFrom(helper.make_attribute(attribute.name, value, attr_type=attribute.type))
                    label = (f"{node.op_type} " if len(nodes) > 1 else "") + \
                        f"{attribute.name}={shown(value)}"
                    found.append(Probe("attributes", label, model, sample.arrays,
                                       {**target.attributes(base),
                                        attribute.name: attribute_value(changed)},
                                       target.rows_of(sample), sample=sample.name,
                                       varied=attribute.name))
    return found


# --- integer ids ----------------------------------------------------------------------------

def id_inputs(target) -> dict:
    """Integer 1-D inputs -> their properties over every sample that has them:
    {"sorted": bool, "low": the smallest value}; only non-negative ones (ids)."""
    found = {}
    for name in target.input_names:
        arrays = [s.arrays[name] for s in target.samples if name in s.arrays]
        if not arrays or any(a.dtype.kind not in "iu" or a.ndim != 1 or not a.size
                             for a in arrays):
            continue
        if any(a.min() < 0 for a in arrays):
            continue
        found[name] = {"sorted": all((np.diff(a) >= 0).all() for a in arrays),
                       "low": int(min(a.min() for a in arrays))}
    return found


def id_variants(ids: np.ndarray, sorted_: bool) -> dict:
    """Variants inside the properties (sorted stays sorted, non-negative stays so)."""
    values = np.unique(ids)
    low = int(values[0])
    middle = int(values[len(values) // 2])
    found = {
        f"id {middle} has no rows (the ids from it on moved up by one)":
            np.where(ids >= middle, ids + 1, ids),
        f"id {low} has no rows (every id moved up by one)": ids + 1,
        f"one group (every id {low})": np.full_like(ids, low),
        "every row its own group": low + np.arange(len(ids), dtype=ids.dtype),
        f"ids {low} and {low + 2} only (id {low + 1} has no rows)":
            np.where(np.arange(len(ids)) < len(ids) // 2, low, low + 2).astype(ids.dtype),
    }
    if not sorted_:
        found["the ids reversed"] = ids[::-1].copy()
    return {text: v for text, v in found.items() if not np.array_equal(v, ids)}


def index_probes(target) -> list:
    found = []
    for name, properties in id_inputs(target).items():
        for sample in target.samples:
            if name not in sample.arrays:
                continue
            model = bare(target.sample_model(sample))
            for text, ids in id_variants(sample.arrays[name], properties["sorted"]).items():
                found.append(Probe("indices", f"{name}: {text}", model,
                                   {**sample.arrays, name: ids}, target.attributes(model),
                                   target.rows_of(sample), sample=sample.name))
    return found


# --- grown copies and the other float types ---------------------------------------------------

def retyped(model, arrays: dict):
    """The model with each float input declared as its array's type."""
    for name, array in arrays.items():
        if array.dtype.kind == "f":
            model = with_input_type(model, name, array)
    return model


def larger_probes(target, factor: int, samples: set) -> list:
    """The probes of ``factor`` times the rows of each sample named in ``samples``
    (factor 1: the samples as given, in the op's other float types)."""
    found = []
    for s, sample in enumerate(target.samples):
        places = target.rows_of(sample)
        rows = row_count(sample.arrays, places)
        if sample.name not in samples or not rows and factor > 1:
            continue
        along = {name for name, _ in places}
        if factor > 1 and 2 * sum(a.nbytes * (factor if k in along else 1)  # float64 copies too
                                  for k, a in sample.arrays.items()) > target.budget:
            continue  # over the budget: not even built
        arrays = grown(sample.arrays, places, factor, SEED + s) if factor > 1 else sample.arrays
        model = target.sample_model(sample)
        attributes = target.attributes(model)
        floats = [k for k, a in sample.arrays.items() if a.dtype.kind == "f"]
        label = f"grown to {rows * factor} rows" if factor > 1 else "as given"
        if factor > 1:
            found.append(Probe("larger", label, bare(model), arrays, attributes, places,
                               sample=sample.name))
        for narrow in FLOATS if floats else []:  # the same values in each type: rounded to it first
            values = {k: a.astype(narrow) if k in floats else a for k, a in arrays.items()}
            if not all(np.isfinite(values[k]).all() or not np.isfinite(arrays[k]).all()
                       for k in floats):
                continue  # does not fit the type
            for wide in [t for t in FLOATS if np.dtype(t).itemsize > np.dtype(narrow).itemsize]:
                cast = {k: a.astype(wide) if k in floats else a for k, a in values.items()}
                found.append(Probe(
                    "larger", f"{label}, {np.dtype(narrow).name}", retyped(model, values),
                    values, attributes, places, wide=np.dtype(wide), sample=sample.name,
                    wide_probe=Probe("larger", f"{label}, {np.dtype(wide).name}",
                                     retyped(model, cast), cast, attributes, places)))
    return found


def larger(target, timeout: float) -> list:
    """The larger probes, run factor after factor while a sample's runs stay quick."""
    done, growing = [], {sample.name for sample in target.samples}
    for factor in (1, *GROWTH):
        wave = larger_probes(target, factor, growing)
        run_probes(target, wave, timeout)
        done += wave
        if any(p.outcome["kind"] == "failed" for p in wave):
            break
        if factor > 1:  # a sample left out (no rows, or over the budget) stays out
            growing &= {p.sample for p in wave}
        growing -= {p.sample for p in wave if p.seconds >= GROW_SECONDS}
    return done


# --- running and judging --------------------------------------------------------------------

def run_probes(target, probes: list, timeout: float, kind: str = "run") -> None:
    """Runs the probes (and the wider runs they compare with) in child
    processes; sets each probe's outcome."""
    cases, runs = [], []
    for p, probe in enumerate(probes):
        for which, one in (("", probe), ("w", probe.wide_probe)):
            if one is None:
                continue
            names = {i.name for i in one.model.graph.input}
            cid = f"{one.check}{which}:{p}"
            cases.append({"id": cid, "kind": kind, "model": target.write_model(one.model),
                          "feeds": [target.write_feeds({k: v for k, v in one.arrays.items()
                                                        if k in names})],
                          "out": str(target.new_path(".npz"))})
            runs.append((cid, one))
    results = run_cases(cases, target.libraries, target.new_path("-explore"), timeout)
    by_id = {c["id"]: c for c in cases}
    for cid, one in runs:
        done = results[cid]
        one.seconds = done.get("seconds", 0.0)
        one.outcome = {"kind": "failed", "text": stopped(done)} if stopped(done) else \
            {"kind": "refused", "text": refusal(done)} if done["status"] != "ran" else \
            {"kind": "ran", "out": by_id[cid]["out"]}
    for probe in probes:
        judge(target, probe)


def refusal(done) -> str:
    """ORT's message, without the work directory's file it names."""
    return re.sub(r"Load model from \S+ failed:\s*", "", line(done))


def outputs_of(target, probe) -> list:
    with np.load(probe.outcome["out"]) as data:
        return [data[k] for k in target.output_names if k in data.files]


def judge(target, probe) -> None:
    """Turns a run into a verdict: failed (with the finding), refused, ran,
    or unjudged (nothing to compare with)."""
    if probe.outcome["kind"] != "ran":
        return
    got = outputs_of(target, probe)
    if probe.wide is not None:
        wide = probe.wide_probe
        if wide.outcome["kind"] != "ran":
            probe.outcome = {"kind": "unjudged", "text": f"{probe.wide.name} "
                             f"{wide.outcome['kind']}: {wide.outcome['text']}"}
            return
        expected = outputs_of(target, wide)
        probe.seconds = max(probe.seconds, wide.seconds)
        got = [g.astype(e.dtype) if g.dtype.kind == "f" and e.dtype.kind == "f" else g
               for g, e in zip(got, expected)]
        rtol, atol = tolerance(narrow(probe), expected, probe.rows(), target.rtol, target.atol)
        against = f"the op's {probe.wide.name} run on the same values"
    else:
        if target.reference is None or (probe.varied and probe.varied not in accepted(
                target.reference, probe.attributes)):
            probe.outcome = {"kind": "unjudged", "text": "no reference for it"}
            return
        try:
            began = time.monotonic()
            expected = target.expected(probe.arrays, probe.attributes)
            probe.seconds = max(probe.seconds, time.monotonic() - began)
        except Exception as error:  # noqa: BLE001  the reference does not take this variant
            probe.outcome = {"kind": "unjudged", "text": f"the reference raises "
                             f"({type(error).__name__})"}
            return
        rtol, atol = target.rtol, target.atol
        if probe.check == "larger":  # a sum over more rows rounds more
            floats = [a.dtype for a in probe.arrays.values() if a.dtype.kind == "f"]
            rtol, atol = tolerance(min(floats, key=lambda t: t.itemsize, default=np.float64),
                                   [np.asarray(e) for e in expected], probe.rows(), rtol, atol)
        against = "the reference"
    problem = compare(got, expected, target.output_names, rtol, atol)
    probe.outcome = {"kind": "failed", "text": f"differs from {against}: {problem}"} if problem \
        else {"kind": "ran"}


def tolerance(dtype, expected, rows, rtol, atol):
    """(rtol, atol) for a result of ``dtype`` over ``rows`` rows: two units in
    the last place of each value (or rtol if larger), plus the rounding of a
    sum over every row in the type a kernel accumulates in (float32 for
    float16 and float32, float64 for float64: PyTorch's convention), at the
    output's largest magnitude."""
    dtype = np.dtype(dtype)
    summed = np.finfo(np.float32 if dtype.itemsize <= 4 else np.float64).eps
    scale = max((float(np.abs(e.astype(np.float64)).max()) for e in expected
                 if e.dtype.kind == "f" and e.size), default=0.0)
    return max(rtol, 2 * float(np.finfo(dtype).eps)), atol + max(rtol, rows * summed) * scale


# --- the verdicts ---------------------------------------------------------------------------

PROBES = {"attributes": attribute_probes, "indices": index_probes}
NOTHING = {"attributes": "the custom nodes have no attribute of a type it varies",
           "indices": "no input holds non-negative integer ids (1-D)",
           "larger": "no input has a named dimension to grow"}


def check(name, target, timeout, failures) -> dict:
    from .shrink import shrunk

    if name == "larger":
        probes = larger(target, timeout)
    else:
        probes = PROBES[name](target)
        run_probes(target, probes, timeout)
    if not probes:
        return record(name, True, f"does not apply: {NOTHING[name]}")
    failed = [p for p in probes if p.outcome["kind"] == "failed"]
    if failed:
        return record(name, False, shrunk(target, failed[0], timeout, failures))
    counts = {k: sum(p.outcome["kind"] == k for p in probes) for k in ("ran", "refused",
                                                                        "unjudged")}
    refused = sorted({f"{p.label} ({p.outcome['text']})" for p in probes
                      if p.outcome["kind"] == "refused"})
    detail = f"{len(probes)} cases: {counts['ran']} ran and agree"
    if counts["unjudged"]:
        detail += f", {counts['unjudged']} ran with nothing to compare with"
    if refused:
        detail += f", {counts['refused']} refused with an error (e.g. {refused[0]})"
    if name == "larger":
        detail += "; " + sizes(probes)
    return record(name, True, detail + ", none crashed or hung")


def sizes(probes) -> str:
    grown_to = max((p.rows() for p in probes), default=0)
    types = sorted({f"{narrow(p).name} and {p.wide.name}" for p in probes
                    if p.wide is not None and p.outcome["kind"] == "ran"})
    found = f"grown up to {grown_to} rows"
    if types:
        found += f"; the op's float types agree on the same values ({', '.join(types)}, " \
            "within the narrower type's spacing)"
    return found


def narrow(probe) -> np.dtype:
    """The float type a type probe runs."""
    return next(a.dtype for a in probe.arrays.values() if a.dtype.kind == "f")
