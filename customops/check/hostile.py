"""The checks on hostile input: omitted inputs and outputs, wrong types and
ranks, empty and degenerate sizes, non-finite values.

Each case is a model variant and a feed, run in a child process.  An error
(at load or at run) is a fine answer; a signal or a hang fails the check,
naming the case.  An omitted input that runs must give the reference's
result for the sample without that input, when the reference takes it.
"""

from __future__ import annotations

import numpy as np
from onnx import helper

from .record import record
from .runner import stopped
from .target import copy, loosened, named_dims, with_input_type
from .valid import compare

OTHER_TYPES = [np.float32, np.float64, np.int32, np.int64]
# Empty-named inputs appended after a node's last one, one more per case: the
# library accepts as many as its op declares (optional ones the model leaves
# out) and refuses the next.  An op that accepts them all is variadic, or
# declares more: the report says which inputs stayed untested.
APPENDED = 6


def _prune(model):
    """Removes the graph inputs no node reads any more."""
    used = {name for node in model.graph.node for name in node.input}
    for graph_input in [i for i in model.graph.input if i.name not in used]:
        model.graph.input.remove(graph_input)
    return model


def omitted_models(model):
    """{description: (model, the input it omits)} for each custom-node input given the empty name,
    trailing inputs dropped, and each output given the empty name."""
    from ..doctor.probe import STANDARD_DOMAINS

    found = {}
    for n, node in enumerate(model.graph.node):
        if node.domain in STANDARD_DOMAINS:
            continue
        label = f"{node.op_type} " if len(model.graph.node) > 1 else ""
        for i, name in enumerate(node.input):
            if not name:
                continue
            variant = copy(model)
            variant.graph.node[n].input[i] = ""  # kept in place, even when last
            found[f"{label}input {i} ({name}) omitted"] = _prune(variant), name
        for extra in range(1, APPENDED + 1):  # an optional input the model does not use
            variant = copy(model)
            variant.graph.node[n].input.extend([""] * extra)
            found[f"{label}input {len(node.input) + extra - 1} (appended, empty name)"] = \
                variant, None
        for keep in range(len(node.input) - 1, 0, -1):
            variant = copy(model)
            del variant.graph.node[n].input[keep:]
            found[f"{label}inputs {keep}.. dropped"] = _prune(variant), None
        for j, name in enumerate(node.output):
            variant = copy(model)
            variant.graph.node[n].output[j] = ""
            for graph_output in [o for o in variant.graph.output if o.name == name]:
                variant.graph.output.remove(graph_output)
            if not variant.graph.output:  # a graph needs an output: keep one of its inputs
                first = next(k for k in node.input if k)
                variant.graph.node.append(helper.make_node("Identity", [first], ["kept"]))
                variant.graph.output.append(helper.make_empty_tensor_value_info("kept"))
            found[f"{label}output {j} ({name}) omitted"] = variant, None
    return found


def _case(target, cid, model, arrays, **extra):
    """A case running ``model`` once, in a fresh session, on ``arrays``."""
    names = {i.name for i in model.graph.input}
    feeds = target.write_feeds({k: v for k, v in arrays.items() if k in names})
    return {"id": cid, "kind": "fresh", "model": target.write_model(model), "feeds": [feeds],
            "out": None, "twice": True, **extra}


def omitted_cases(target):
    sample = target.samples[0]
    base = target.sample_model(sample)
    return [_case(target, f"omitted:{text}", model, sample.arrays, omits=omits,
                  out=str(target.new_path(".npz")))
            for text, (model, omits) in omitted_models(base).items()]


def type_cases(target):
    sample, found = target.samples[0], []
    base = target.sample_model(sample)
    for name, array in sample.arrays.items():
        others = [t for t in OTHER_TYPES if np.dtype(t) != array.dtype]
        kinds = [next(t for t in others if np.dtype(t).kind == "f"),
                 next(t for t in others if np.dtype(t).kind == "i")]
        # a string input gets numbers of its shape (a string says nothing as a number),
        # a numeric one also its values as strings
        variants = {f"{name} as {np.dtype(t).name}": array.astype(t) if array.dtype.kind
                    not in "US" else np.zeros(array.shape, t) for t in kinds}
        if array.dtype.kind not in "US":
            variants[f"{name} as string"] = array.astype(str)
        variants[f"{name} with one more dimension"] = array[..., None]
        if array.ndim >= 2:
            variants[f"{name} with one dimension less"] = array.reshape(array.shape[:-2] + (-1,))
        elif array.ndim == 1 and array.size:
            variants[f"{name} with one dimension less"] = array[0]
        for text, changed in variants.items():
            found.append(_case(target, f"types:{text}", with_input_type(base, name, changed),
                               {**sample.arrays, name: changed}))
    return found


def empty_cases(target):
    """Each named dimension set to 0 and 1 in every input that has it, then
    each dimension of each input alone (a call that is also inconsistent)."""
    found = []
    for sample in target.samples:
        model = target.sample_model(sample)
        changes = {f"{name}": places for name, places in named_dims(model).items()}
        changes.update({f"{name} dimension {axis}": [(name, axis)]
                        for name, array in sample.arrays.items() for axis in range(array.ndim)})
        for text, places in changes.items():
            for new in (0, 1):
                arrays = dict(sample.arrays)
                for name, axis in places:
                    if name in arrays and axis < arrays[name].ndim:
                        arrays[name] = np.take(arrays[name], range(min(new, arrays[name].shape[axis])), axis=axis)
                if all(arrays[n].shape == sample.arrays[n].shape for n in arrays):
                    continue  # already that size
                found.append(_case(target, f"empty:{text} set to {new} (sample {sample.name})",
                                   loosened(model), arrays))
    return found


def nonfinite_cases(target):
    found = []
    for sample in target.samples:
        model = loosened(target.sample_model(sample))
        for name, array in sample.arrays.items():
            if array.dtype.kind != "f" or not array.size:
                continue
            for value in (np.nan, np.inf, -np.inf):
                changed = array.copy()
                changed.flat[0] = value
                found.append(_case(target, f"nonfinite:{value} in {name} (sample {sample.name})",
                                   model, {**sample.arrays, name: changed}))
    return found


CASES = {"omitted": omitted_cases, "types": type_cases, "empty": empty_cases,
         "nonfinite": nonfinite_cases}


def check(name, target, cases, results):
    """The verdict for one group: the first case that crashed or hung fails it."""
    mine = [c for c in cases if c["id"].startswith(f"{name}:")]
    counts = {"ran": 0, "refused": 0}
    nan_out = []
    for case in mine:
        done, text = results[case["id"]], case["id"].split(":", 1)[1]
        problem = stopped(done)
        if problem:
            return record(name, False, f"{text}: {problem}")
        if done["status"] != "ran":
            counts["refused"] += 1
            continue
        counts["ran"] += 1
        if name == "omitted":
            problem = _omitted_result(target, case)
            if problem:
                return record(name, False, f"{text}: ran, but {problem}")
        if name == "nonfinite" and any(o[3] for o in done["outputs"]):
            nan_out.append(text.split(" in ", 1)[1].split(" (")[0])  # the input
    detail = f"{len(mine)} cases: {counts['refused']} refused with an error, {counts['ran']} ran"
    if name == "omitted":
        detail += _appended(mine, results)
    if name == "nonfinite" and not mine:
        return record(name, True, "does not apply: no input of a float type")
    if name == "nonfinite":
        detail += (f"; NaN or inf in {', '.join(sorted(set(nan_out)))} made outputs non-finite"
                   if nan_out else "; no output held a NaN or inf")
    return record(name, True, detail + ", none crashed or hung")


def _appended(cases, results) -> str:
    """What the appended empty inputs tested, per node: '; the library takes
    N more inputs than the node gives (run empty), refuses the next', or
    that it took them all and inputs beyond were not tested."""
    appended = {}
    for case in cases:
        text = case["id"].split(":", 1)[1]
        if "(appended, empty name)" in text:
            node = text.split("input ")[0]
            appended.setdefault(node, []).append(results[case["id"]]["status"] != "refused-load")
    found = []
    for node, accepted in appended.items():
        taken = accepted.index(False) if False in accepted else len(accepted)
        where = f" of {node.strip()}" if node else ""
        if taken == len(accepted):
            found.append(f"the node{where} takes all {taken} empty inputs appended: inputs "
                         f"after those were not tested")
        elif taken == 0:
            found.append(f"the node{where} takes no input after the model's (an empty one "
                         "appended is refused)")
        else:
            found.append(f"the node{where} takes {taken} more input{'s' * (taken != 1)} than the "
                         "model gives (each tested empty), refuses the next")
    return "; " + "; ".join(found) if found else ""


def _omitted_result(target, case) -> str | None:
    """Compares an omitted input's run with the reference called without it."""
    if target.reference is None or case["omits"] is None:
        return None
    arrays = {k: v for k, v in target.samples[0].arrays.items() if k != case["omits"]}
    try:
        expected = target.expected(arrays, target.attributes(target.sample_model(
            target.samples[0])))
    except Exception:  # noqa: BLE001  the reference needs that input: nothing to compare with
        return None
    with np.load(case["out"]) as data:
        got = [data[k] for k in target.output_names if k in data.files]
    return compare(got, expected, target.output_names, target.rtol, target.atol)
