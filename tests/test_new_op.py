"""python -m customops.new_op: what it refuses, what it writes, and that the
project it writes builds and passes its own tests (and fails them when its
kernel is wrong).  The template is checked only through what the generator
writes, so a template that stops building or testing fails here."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from customops import new_op

REPOSITORY = Path(__file__).resolve().parents[1]
OP, NAMESPACE, NAME = "geo::ball_sum", "geo", "ball_sum"
TEMPLATE_WORDS = re.compile(r"my_ops|scaled_row_sum|ScaledRowSum")


def run_new_op(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "customops.new_op", *map(str, args)],
                          capture_output=True, text=True, cwd=cwd)


@pytest.mark.parametrize("spec, message", [
    ("ball_sum", "NAMESPACE::NAME must be two identifiers"),
    ("geo:ball_sum", "NAMESPACE::NAME must be two identifiers"),
    ("geo::ball::sum", "NAMESPACE::NAME must be two identifiers"),
    ("geo::", "NAMESPACE::NAME must be two identifiers"),
    ("1geo::ball_sum", "NAMESPACE::NAME must be two identifiers"),
    ("geo::ball-sum", "NAMESPACE::NAME must be two identifiers"),
    ("geo::class", "'class' is a keyword"),
    ("lambda::op", "'lambda' is a keyword"),
    ("aten::ball_sum", "the namespace 'aten' belongs to torch"),
])
def test_refuses_a_bad_name_with_the_rule_in_one_line(tmp_path, spec, message):
    done = run_new_op(spec, tmp_path / "project")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and message in done.stderr
    assert not (tmp_path / "project").exists()


def test_refuses_a_non_empty_directory(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    done = run_new_op(OP, tmp_path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert f"{tmp_path} is not empty" in done.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


def test_writes_into_an_empty_directory(tmp_path):
    done = run_new_op(OP, tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "csrc" / f"{NAME}.h").is_file()


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    directory = tmp_path_factory.mktemp("new_op") / "project"
    new_op.generate(OP, directory)
    return directory


def test_every_template_file_is_written_renamed(project):
    written = sorted(str(p.relative_to(project)) for p in project.rglob("*") if p.is_file())
    expected = sorted(str(p.relative_to(new_op.TEMPLATE)).replace("scaled_row_sum", NAME)
                      for p in new_op.template_files())
    assert written == expected
    assert {"csrc/ball_sum.h", "csrc/torch_binding.cpp", "csrc/ort_op.cc", "csrc/ort_op.lds",
            "host/main.cc", "Makefile", "README.md", "export.py"} <= set(written)


def test_no_trace_of_the_template_or_this_repository(project):
    for path in project.rglob("*"):
        if path.is_file():
            text = path.read_text()
            assert not TEMPLATE_WORDS.search(text), path
            assert str(REPOSITORY) not in text, path
            # customops may be named (the optional check, the headers' cache), never imported
            assert not re.search(r"^\s*(import|from) customops", text, re.MULTILINE), path
    assert 'TORCH_LIBRARY(geo, m)' in (project / "csrc" / "torch_binding.cpp").read_text()
    assert 'Ort::CustomOpDomain d("geo")' in (project / "csrc" / "ort_op.cc").read_text()
    assert "struct BallSumOp" in (project / "csrc" / "ort_op.cc").read_text()


def test_renames_in_one_pass(tmp_path):
    """A new name that contains the template's namespace is not renamed again."""
    new_op.generate("geo::my_ops_sum", tmp_path)
    assert "torch.ops.geo.my_ops_sum(x, weight, self.scale)" in (tmp_path / "export.py").read_text()


def test_the_template_name_gives_the_template_back(tmp_path):
    new_op.generate("my_ops::scaled_row_sum", tmp_path)
    for source in new_op.template_files():
        assert (tmp_path / source.relative_to(new_op.TEMPLATE)).read_text() == source.read_text()


def make_test(directory):
    # No timeout: it would kill make and leave its g++ running; on a loaded
    # machine the torch binding alone took 40 minutes to compile.  Not a
    # sub-make of ours (under `make test` the variables would say so).
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    return subprocess.run(["make", "test", f"PYTHON={sys.executable}"], cwd=directory,
                          capture_output=True, text=True, env=env)


def test_generated_project_builds_and_passes_its_tests(project):
    done = make_test(project)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = [line for line in done.stdout.splitlines() if re.search(r" in [\d.]+s", line)][-1]
    # customops.check is installed here, so the project's check test runs too
    assert re.search(r"\d+ passed", summary) and "failed" not in summary and \
        "skipped" not in summary, summary


def test_generated_tests_fail_when_the_kernel_is_wrong(project, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(project, broken, symlinks=True)  # with build/, if the test above ran: a shorter rebuild
    header = broken / "csrc" / f"{NAME}.h"
    right = "sum[i] = static_cast<float>(scale * total);"
    assert right in header.read_text()
    header.write_text(header.read_text().replace(right, "sum[i] = static_cast<float>(scale * total) + 1;"))
    done = make_test(broken)
    assert done.returncode != 0
    failed = set(re.findall(r"^FAILED tests/(\w+)\.py::(\w+)", done.stdout, re.MULTILINE))
    assert {("test_torch_op", "test_equals_reference"), ("test_ort", "test_ort_equals_pytorch"),
            ("test_host", "test_host_runs_the_model")} <= failed, done.stdout[-3000:]
