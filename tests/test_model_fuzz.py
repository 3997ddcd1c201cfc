"""Every tool that reads a model file, against hostile model files
(tests/model_fuzz.py, tests/hostile_models.py): hand-made edge cases, then
mutations of models built here.  Each tool runs on each case in a child
process with a time limit; a traceback, an internal error, a signal or a hang
fails the test, naming the case (seed and number) so that `python
tests/model_fuzz.py --seed S --case K --keep DIR` replays it (the failing
case's files also stay in the test's tmp_path).

MODEL_FUZZ_CASES (environment) sets how many cases a tool gets (default below,
sized to keep the whole file within about a minute on a 2-core machine)."""

from __future__ import annotations

import os
import sys

import numpy as np
import onnx
import pytest

from customops.ort import session
from hostile_models import (DATA, EDGES, MUTATIONS, NOT_UTF8, NOT_UTF8_FIELDS, Case, make_case,
                            seeds)
from model_fuzz import TOOLS, Answer, Tool, children_cpu, cli, run, run_tool

CASES = int(os.environ.get("MODEL_FUZZ_CASES", "80"))


@pytest.mark.parametrize("name", list(TOOLS))
def test_tool_survives_hostile_models(name, rng, tmp_path, capsys):
    tool = TOOLS[name]
    assert tool.needs is None or tool.needs.is_file(), f"{tool.needs} is missing: `make cpp`"
    seed = int(rng.integers(0, 2**31))
    assert CASES > len(EDGES)  # every edge case, then mutations
    cpu = children_cpu()
    cases = max(len(EDGES) + 1, round(CASES * tool.share))
    failures = run(seed, range(cases), [tool], tmp_path)
    cpu = children_cpu() - cpu
    assert not failures, (f"{len(failures)} of {cases} cases failed; replay one with "
                          "python tests/model_fuzz.py --seed S --case K --keep DIR\n\n"
                          + "\n\n".join(failures[:5]))
    with capsys.disabled():
        print(f"\nmodel fuzz: {name} answered {cases} hostile models acceptably "
              f"({len(EDGES)} edge cases, seed {seed}; {cpu:.0f} s CPU)")


BROKEN_SEEDS = {"knn-constant-input": "Type Error"}  # the seeds' KNNQuery, broken on purpose


@pytest.mark.parametrize("seed", seeds(), ids=lambda seed: seed.name)
def test_seeds_run_in_onnxruntime(seed, tmp_path):
    """The mutations start from models that run (or fail as the seeds' own export does)."""
    path = tmp_path / "model.onnx"
    path.write_bytes(seed.model)
    if seed.data is not None:
        (tmp_path / DATA).write_bytes(seed.data)
    if seed.name in BROKEN_SEEDS:
        with pytest.raises(Exception, match=BROKEN_SEEDS[seed.name]):
            session(str(path))
        return
    outputs = session(str(path)).run(None, seed.inputs)
    assert outputs and all(np.all(np.isfinite(o)) for o in outputs)


def test_cases_replay_identically(tmp_path):
    """A case is a function of (seed, number): the replay command rebuilds it."""
    corpus = seeds()
    for k in (0, len(EDGES) + 1, len(EDGES) + 7, 999):
        first = make_case(5, k, corpus, tmp_path / f"a{k}")
        again = make_case(5, k, corpus, tmp_path / f"b{k}")
        assert first.what == again.what
        assert first.model.read_bytes() == again.model.read_bytes()


def test_every_mutation_is_drawn(tmp_path):
    corpus = seeds()
    drawn = {make_case(1, k, corpus, tmp_path / str(k)).what.split(": ")[1]
             for k in range(len(EDGES), len(EDGES) + 60)}
    assert drawn == {m.__name__ for m in MUTATIONS}, drawn


@pytest.mark.parametrize("field", list(NOT_UTF8_FIELDS))
def test_not_utf8_edge_cases_hold_raw_bytes(field):
    """Python's protobuf returns bytes for such a string: the edge case is real."""
    data, _, _ = EDGES[f"not-utf8-{field}"]()
    model = onnx.load_from_string(data)
    strings = [model.graph.node[0].name, model.graph.node[0].op_type, model.graph.node[0].domain,
               model.graph.node[0].attribute[0].name, model.graph.input[0].name,
               model.graph.output[0].name, model.opset_import[-1].domain, model.graph.name,
               model.producer_name, model.graph.node[0].doc_string,
               *(e.key for e in model.metadata_props), *(e.value for e in model.metadata_props)]
    assert [s for s in strings if isinstance(s, bytes)] == [NOT_UTF8]


# -- the harness itself: what fails a case -----------------------------------------

PYTHON_TOOL = cli("tool", {0: 0, 1: 0, 2: 1}, lambda answer: None)


@pytest.mark.parametrize("code,expected", [
    ("import os; os.abort()", "killed by signal SIGABRT"),
    ("import time; time.sleep(30)", "no answer within 1 s (a hang)"),
    ("raise ValueError('bad')", "a Python traceback"),
    ("import sys; sys.exit('tool: oops')", "1 line(s) on stderr with exit status 1"),
    ("import sys; print('tool: internal error', file=sys.stderr); sys.exit(3)", "exit status 3"),
    ("import sys; print('tool: cannot read', file=sys.stderr); sys.exit(2)", None),
    ("import sys; print('findings'); sys.exit(1)", None),
    ("import sys; print('tool: a\\nb', file=sys.stderr); sys.exit(2)", "2 line(s) on stderr"),
])
def test_the_harness_fails_what_it_must(code, expected, tmp_path):
    tool = Tool("fake", lambda case: [sys.executable, "-c", code], PYTHON_TOOL)
    case = Case(0, "seed 0 case 0", "test", tmp_path)
    problem = run_tool(tool, case, timeout=1)
    if expected is None:
        assert problem is None
    else:
        assert problem is not None and problem.startswith(expected), problem


HEADER = "m.onnx: onnxruntime 1.32.0 (reads IR <= 14), libraries: libcustomops_ort.so"


@pytest.mark.parametrize("status,stdout,expected", [
    (1, "{\n  \"exit_status\": 1\n}", None),
    (0, "{\n  \"exit_status\": 1\n}", "the JSON report says exit status 1"),
    (1, "{\n  \"exit_st", "stdout is not the JSON report"),
    (0, f"{HEADER}\n0 error(s), 1 warning(s): the model loads\n", None),
    (1, f"{HEADER}\nerror   ...\n", "no summary on stdout"),
    (1, f"EP Error\n{HEADER}\n1 error(s), 0 warning(s)\n",
     "stdout does not start with the report's header"),
])
def test_the_doctors_report_is_checked(status, stdout, expected):
    assert TOOLS["doctor"].verdict(Answer(status, stdout, "")) == expected


def test_run_models_answer_is_checked():
    verdict = TOOLS["run_model"].verdict
    assert verdict(Answer(0, "y: float32 (2, 3)\nidx: int32 (3, 2) -> idx-2.npy\n", "")) is None
    assert verdict(Answer(1, "", "run_model: error: cannot load model\n")) is None
    assert verdict(Answer(1, "", "")) == "0 line(s) on stderr with exit status 1"
    assert verdict(Answer(0, "", "")) == "stdout is not one line per output"
    assert verdict(Answer(2, "", "run_model: error: no model given\nusage: ...\n")) == \
        "exit status 2"  # a usage error: the harness gave a wrong command line
