"""A failure of the exploring checks, shrunk and written as a case the user
replays alone.

Shrinking drops rows (along the sample's first named dimension, in every
input that has it) while the case fails the same way: each round tries the
case without each group of equal ids, with only each group, with the first
or second half of the rows, and with the first half of every group, smallest
first, and keeps the smallest that still fails.  The ids keep their
values (a gap stays a gap), the attribute value and the float type stay
those that failed.  The result is written as MODEL.onnx and MODEL.npz in the
failures directory, run once more alone in a fresh process (it must fail
again there), and named in the finding with the command that replays it.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import numpy as np

ROUNDS = 24      # at most; each halves or drops a group
CANDIDATES = 10  # per round: each that crashes costs a new child process


def kind(probe) -> str:
    """How it failed, as the shrinker must keep it: the crash's words, or a mismatch."""
    text = probe.outcome.get("text") or ""
    return "differs" if text.startswith("differs") else text


def ids_of(probe):
    """The integer 1-D input along the rows, if any: the groups."""
    for name, axis in probe.places:
        array = probe.arrays.get(name)
        if array is not None and array.ndim == 1 and array.dtype.kind in "iu":
            return array
    return None


def candidates(probe) -> list:
    rows = probe.rows()
    everything = np.arange(rows)
    found = []
    ids = ids_of(probe)
    if ids is not None:
        values = list(dict.fromkeys(ids.tolist()))
        if len(values) > 1:
            step = max(1, len(values) // (CANDIDATES // 2))
            for value in values[::step]:
                found.append(everything[ids == value])   # only this group
                found.append(everything[ids != value])   # every group but this one
        halves = np.concatenate([everything[ids == v][: max(1, (ids == v).sum() // 2)]
                                 for v in values])
        found.append(halves)                             # every group halved
    found += [everything[: rows // 2], everything[rows // 2:]]
    unique = {}
    for kept in found:
        if 0 < len(kept) < rows:
            unique.setdefault(tuple(kept.tolist()), kept)
    return [probe.take(r) for r in list(unique.values())[:CANDIDATES]]


def shrink(target, probe, timeout):
    """The smallest case found that fails as ``probe`` does.  The candidates
    run smallest first; after a crash, two at a time (each crash costs a new
    child process), stopping at the first that fails."""
    from .explore import run_probes

    best, wanted = probe, kind(probe)
    chunk = CANDIDATES if wanted == "differs" else 2
    for _ in range(ROUNDS):
        smaller = sorted(candidates(best), key=lambda c: c.rows())
        failing = []
        for start in range(0, len(smaller), chunk):
            run_probes(target, smaller[start:start + chunk], timeout)
            failing = [c for c in smaller[start:start + chunk]
                       if c.outcome["kind"] == "failed" and kind(c) == wanted]
            if failing:
                break
        if not failing:
            break
        best = failing[0]
    return best


def groups(probe) -> str:
    ids = ids_of(probe)
    if ids is None:
        return ""
    if len(ids) <= 12:
        return f", ids {ids.tolist()}"
    values, counts = np.unique(ids, return_counts=True)
    listed = ", ".join(f"{v}: {c}" for v, c in list(zip(values.tolist(), counts.tolist()))[:8])
    return f", rows per id {{{listed}{', ...' if len(values) > 8 else ''}}}"


def write(target, probe, folder: Path) -> tuple:
    folder.mkdir(parents=True, exist_ok=True)
    number = 1
    while (folder / f"{probe.check}-{number}.onnx").exists():
        number += 1
    model, inputs = folder / f"{probe.check}-{number}.onnx", folder / f"{probe.check}-{number}.npz"
    model.write_bytes(probe.model.SerializeToString())
    names = {i.name for i in probe.model.graph.input}
    np.savez(inputs, **{k: v for k, v in probe.arrays.items() if k in names})
    return model, inputs


def replay_command(target, model, inputs) -> str:
    words = ["python", "-m", "customops.check", str(model)]
    for library in target.libraries:
        words += ["--library", library]
    words += ["--inputs", str(inputs)]
    if target.reference_given:
        words += ["--reference", target.reference_given]
    return " ".join(shlex.quote(w) for w in words)


def shrunk(target, probe, timeout, failures) -> str:
    """The finding for a failed probe: what failed, and the shrunk case's files."""
    from .explore import run_probes

    first = f"{probe.label} (sample {probe.sample}): {probe.outcome['text']}"
    best = shrink(target, probe, timeout)
    again = best.take(np.arange(best.rows()))
    run_probes(target, [again], timeout, kind="fresh")  # alone, in a fresh process
    if again.outcome["kind"] != "failed" or kind(again) != kind(probe):
        best = probe  # the smaller case failed only after others: keep the one found
    model, inputs = write(target, best, Path(failures))
    rows = f"{best.rows()} row{'s' * (best.rows() != 1)}{groups(best)}"
    size = f"shrunk to {rows}" if best is not probe else f"{rows}, not shrunk"
    if best is not probe:
        first += f"; {size}, it {best.outcome['text']}"
    else:
        first += f"; {size}"
    return f"{first}; replay: {replay_command(target, model, inputs)}"
