"""python -m customops.new_op: what it refuses, what it writes, and that the
projects it writes build and pass their own tests (and fail them when the
kernel is wrong, one case at a time when the ORT op crashes).  The template is
checked only through what the generator writes, so a template that stops
building or testing fails here."""

import importlib.metadata
import os
from concurrent.futures import ThreadPoolExecutor
import re
import runpy
import shutil
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
import torch

import customops.headers
from customops import new_op
from customops.envs import torch_python
from customops.new_op.render import EXAMPLE_VALUE, domain, grown, schema_module, translation
from customops.new_op.schema import build

REPOSITORY = Path(__file__).resolve().parents[1]
OP, NAMESPACE, NAME = "geo::ball_sum", "geo", "ball_sum"
TEMPLATE_WORDS = re.compile(r"my_ops|scaled_row_sum|ScaledRowSum")
RADIUS_GRAPH = ("geo::radius_graph(Tensor pos, Tensor? batch, float r, int max_num_neighbors=32) -> Tensor edge_index",
                "--dtypes", "float32,float64", "--shapes", "pos: T[n,3]; batch: int64[n]; edge_index: int64[2,E]")
# Every argument kind, an optional input before a present one, one defaulting to
# None, a fixed-type input, two outputs, a data-dependent size, float16.
EVERY_KIND = ('lab::every_kind(Tensor x, Tensor? w, Tensor? bias=None, float alpha=0.25, int k=3, bool flag=True, '
              'str mode="sum", int[] dims=[1, 2], float[] weights=[0.5]) -> (Tensor y, Tensor idx)',
              "--dtypes", "float32,float64,float16", "--shapes", "x: T[b, c]; w: T[c]; bias: float32[2]; "
              "y: T[b, c]; idx: int64[b, K]")


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


@pytest.mark.parametrize("args, message", [
    (["geo::f(Tensor x -> Tensor y"], "a schema is NS::NAME(ARGS) -> RETURNS"),
    (["geo::f(Tensor x)"], "a schema is NS::NAME(ARGS) -> RETURNS"),
    (["geo::f(Tensor[] xs) -> Tensor y"], "argument 'Tensor[] xs': unsupported"),
    (["geo::f(Tensor x, Scalar s) -> Tensor y"], "argument 'Scalar s': unsupported"),
    (["geo::f(Tensor x, int k=1.5) -> Tensor y"], "argument 'k': default 1.5 is not a int"),
    (["geo::f(Tensor x, Tensor x) -> Tensor y"], "argument 'x' appears twice"),
    (["geo::f(float r) -> Tensor y"], "needs at least one required Tensor argument"),
    (["geo::f(Tensor x) -> int y"], "a return is `Tensor name` or `(Tensor a, Tensor b)`"),
    (["geo::f(Tensor x) -> Tensor"], "a return is `Tensor name`"),
    (["geo::f(Tensor class) -> Tensor y"], "argument 'class' must be an identifier that is not a Python or C++ keyword"),
    (["geo::f(Tensor x) -> Tensor y", "--dtypes", "int8"], "--dtypes: unsupported type 'int8'"),
    (["geo::f(Tensor x) -> Tensor y", "--shapes", "x: T[n]; z: T[n]"], "--shapes names 'z', which is not a Tensor"),
    (["geo::f(Tensor x) -> Tensor y", "--shapes", "x: complex64[n]"], "unsupported type 'complex64'"),
    (["geo::f(Tensor x) -> Tensor y", "--shapes", "x: T(n)"], "expected NAME: TYPE[DIMS]"),
    (["geo::f(Tensor x) -> Tensor y", "--shapes", "x: T[n, -1]"], "a dimension is a number or a name, not '-1'"),
    (["geo::f(Tensor x, Tensor? w) -> Tensor y", "--shapes", "x: T[n]; w: T[m]"],
     "the size 'm' appears only in optional inputs"),
    (["geo::f(Tensor x, int k) -> Tensor y", "--shapes", "x: T[k]"], "the size 'k' has the name of an argument"),
    (["geo::f(Tensor x) -> Tensor y", "--shapes", "x: T[n]; y: T[E, E]"], "the data-dependent size 'E' appears twice"),
    (["geo::f(Tensor x) -> Tensor y", "--shapes", "x: T[Stored]"], "the size 'Stored' is a name the generated code uses"),
    (["geo::f(Tensor x) -> Tensor y", "--shapes", "x: int64[n]"], "give one required input type T"),
    (["geo::f", "--dtypes", "float64"], "--dtypes and --shapes need the op's schema"),
    (["geo::voxel_downsample(Tensor pos, float voxel_size, Tensor? weight) -> (Tensor centroids, Tensor counts)"],
     "argument 'weight': Tensor arguments must come before attributes (float voxel_size)"),
    (["geo::f(Tensor x, Tensor? w=0) -> Tensor y"], "argument 'w': a Tensor takes no default; an optional one"),
    (["geo::f(Tensor x=None) -> Tensor y"], "argument 'x': a Tensor takes no default"),
    (["geo::f(Tensor x, float r=1.0, int k) -> Tensor y"], "argument 'k' has no default but follows 'r'"),
    (["geo::f(Tensor x, Tensor? w=None, float r) -> Tensor y"], "argument 'r' has no default but follows 'w'"),
    (["geo::f(Tensor x, Tensor b) -> Tensor y", "--shapes", "x: T[n]; b: T[n] sorted"],
     "`sorted` (sorted non-negative group ids) follows the dims of a rank-1 int64 or int32 tensor, not T[n]"),
    (["geo::f(Tensor x, Tensor b) -> Tensor y", "--shapes", "x: T[n]; b: int64[n] sortd"], "unknown rule 'sortd'"),
    (["geo::f(Tensor x, Tensor b) -> Tensor y", "--shapes", "x: T[n]; b: int64[n, 2] sorted"],
     "follows the dims of a rank-1 int64 or int32 tensor, not int64[n, 2]"),
    (["geo::f(Tensor x) -> Tensor y", "--shapes", "x: T[n]; y: int64[n] sorted"],
     "'y' is an output; `sorted` tells how to draw an input"),
])
def test_refuses_a_bad_schema_in_one_line_writing_nothing(tmp_path, args, message):
    done = run_new_op(args[0], tmp_path / "project", *args[1:])
    assert done.returncode == 2 and done.stdout == "", done.stderr
    assert done.stderr.count("\n") == 1 and message in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "project").exists()


def test_the_schema_model():
    op = build(*RADIUS_GRAPH[:1], RADIUS_GRAPH[2], RADIUS_GRAPH[4])
    assert [(t.name, t.dtype, t.dims, t.optional) for t in op.inputs] == [
        ("pos", "T", ["n", 3], False), ("batch", "int64", ["n"], True)]
    assert [(a.name, a.onnx_type, a.default) for a in op.attributes] == [
        ("r", "FLOAT", None), ("max_num_neighbors", "INT", 32)]
    assert op.symbols() == ["n"] and op.data_dependent() == ["E"] and op.dtypes == ["float32", "float64"]
    every = build(EVERY_KIND[0])
    assert [a.onnx_type for a in every.attributes] == ["FLOAT", "INT", "INT", "STRING", "INTS", "FLOATS"]
    assert [a.default for a in every.attributes] == [0.25, 3, True, "sum", [1, 2], [0.5]]
    assert [(t.optional, t.default_none) for t in every.inputs] == [(False, False), (True, False), (True, True)]
    # not listed: type T, the first input's shape
    assert [(t.dtype, t.dims) for t in every.inputs + every.outputs] == [("T", ["x_size"])] * 5


def test_help_states_the_argument_order():
    done = run_new_op("--help")
    assert done.returncode == 0
    assert "the Tensor arguments first, then the attributes, the arguments with a default last" in \
        " ".join(done.stdout.split())


def test_an_optional_tensor_may_default_to_none(tmp_path):
    """Kept in the schema torch is given, which torch accepts; the fake kernel takes it as a default."""
    spec = "geo::voxel_downsample(Tensor pos, Tensor? weight=None, float voxel_size=0.5) -> Tensor centroids"
    new_op.generate(spec, tmp_path)
    schema = "voxel_downsample(Tensor pos, Tensor? weight=None, float voxel_size=0.5) -> Tensor centroids"
    assert f'm.def("{schema}");' in (tmp_path / "csrc" / "torch_binding.cpp").read_text()
    assert "def _(pos, weight=None, voxel_size=0.5):" in (tmp_path / "op.py").read_text()
    library = torch.library.Library("new_op_test_none", "DEF")
    library.define(schema)  # torch's own parser: raises on a schema it refuses
    assert "Tensor? weight=None" in str(torch.ops.new_op_test_none.voxel_downsample.default._schema)


def test_the_check_the_project_runs_is_named(tmp_path):
    """The project's check test names the customops.check it runs (this repository's here)."""
    new_op.generate(RADIUS_GRAPH[0], tmp_path, RADIUS_GRAPH[2], RADIUS_GRAPH[4])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(tmp_path / "tests"),
                                                         os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", "import test_check; print(test_check.CHECK)"], cwd=tmp_path,
                          capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    version = importlib.metadata.version("customops")
    assert done.stdout.strip() == f"customops.check from {REPOSITORY / 'customops' / 'check'} (customops {version})"
    assert "customops.check from DIR (customops VERSION)" in (tmp_path / "README.md").read_text()


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


def test_the_template_name_gives_the_template_back(tmp_path):
    """The template's regions are what the renderers give for its own schema."""
    new_op.generate("my_ops::scaled_row_sum", tmp_path)
    for source in new_op.template_files():
        assert (tmp_path / source.relative_to(new_op.TEMPLATE)).read_text() == source.read_text(), source.name


def test_renames_in_one_pass(tmp_path):
    """A new name that contains the template's namespace is not renamed again."""
    new_op.generate("geo::my_ops_sum", tmp_path)
    assert "torch.ops.geo.my_ops_sum" in (tmp_path / "tests" / "test_math.py").read_text()


def test_readme_keeps_the_course_op_and_names_the_files_to_edit(tmp_path):
    new_op.generate(RADIUS_GRAPH[0], tmp_path, RADIUS_GRAPH[2], RADIUS_GRAPH[4])
    readme = (tmp_path / "README.md").read_text()
    assert "walks through every step on another op, `my_ops::ball_query`" in readme
    assert "1. `csrc/radius_graph.h`: the body of `radius_graph`" in readme
    assert "and of `radius_graph_E`, the rule that computes `E` from the data" in readme
    assert "2. `reference.py`" in readme
    # the project's own sizes, outputs and commands, not the template's
    assert "**A size only the data give** (`E` of `edge_index: int64[2, E]`)" in readme
    assert "    build/host build/radius_graph_float32.onnx build/libradius_graph_ort.so run\n" in readme
    assert "The C++ host reads run/pos.npy, run/batch.npy and writes run/edge_index.npy" in readme
    assert ("    path/to/run_model --library build/libradius_graph_ort.so build/radius_graph_float32.onnx "
            "pos=run/pos.npy batch=run/batch.npy --out run\n") in readme
    assert "    ORT_PYTHON=$(python -m customops.envs onnxruntime==1.24.4)   # or an older release\n" in readme
    assert '"batch": np.load("run/batch.npy")' in readme
    assert "a model without it (`build/radius_graph_float32_without_batch.onnx`, and `_legacy_without_batch`)" in readme
    assert "Its `run/` holds no `batch.npy`." in readme
    doc = (tmp_path / "op.py").read_text()
    assert "    edge_index = torch.ops.geo.radius_graph(pos, batch, r, max_num_neighbors=32)\n" in doc
    assert "with None for an absent batch." in doc
    assert not TEMPLATE_WORDS.search(readme.replace("my_ops::ball_query", "") + doc)


def make_test(directory):
    # No timeout: it would kill make and leave its g++ running; on a loaded
    # machine the torch binding alone took 40 minutes to compile.  Not a
    # sub-make of ours (under `make test` the variables would say so).
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    return subprocess.run(["make", "test", f"PYTHON={sys.executable}"], cwd=directory,
                          capture_output=True, text=True, env=env)


def make(directory, *targets):
    """`make TARGETS` in a generated project, as make_test runs it."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    return subprocess.run(["make", *targets, f"PYTHON={sys.executable}"], cwd=directory, capture_output=True,
                          text=True, env=env)


def passed(done) -> int:
    """The number of tests passed, once every test passed; no skip, no failure."""
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = [line for line in done.stdout.splitlines() if re.search(r" in [\d.]+s", line)][-1]
    # customops.check is installed here, so the project's check test runs too
    assert re.fullmatch(r"\d+ passed in [\d.]+s( \([\d:]+\))?", summary), summary  # (0:01:15) past a minute
    return int(summary.split()[0])


def generated(directory, *args, math=False):
    """A project generated from ``args`` (the template's op renamed for OP alone),
    ``math`` the FPS user's installed, built and tested: (its directory, the make test)."""
    if args == (OP,):
        new_op.generate(OP, directory)
    else:
        assert run_new_op(args[0], directory, *args[1:]).returncode == 0
    if math:
        install_math(directory)
    return directory, make_test(directory)


# A generated project's `make test` is minutes of g++ and child processes, mostly on one
# core: these jobs (JOBS, at the end) run in the background, two at a time, all submitted
# when the module starts if a selected test names them (as a fixture or a parameter).  A
# test then waits only for its own.  A job changing a copy of another's project (PARENT)
# gets that copy made when the other is done, before any test here can change it.
class Background:
    def __init__(self, request, tmp_path_factory):
        wanted = set()
        for item in request.session.items:
            if getattr(item, "module", None) is request.module:  # a notebook's cell has no module
                parameters = item.callspec.params.values() if hasattr(item, "callspec") else ()
                wanted |= set(item.fixturenames) | {p for p in parameters if isinstance(p, str)}
        wanted |= {PARENT[name] for name in wanted if name in PARENT}
        names = [name for name in JOBS if name in wanted]  # parents first: none waits for one not started
        directories = {name: tmp_path_factory.mktemp(name) / "project" for name in names}
        self.pool = ThreadPoolExecutor(max_workers=min(2, len(os.sched_getaffinity(0))))
        self.futures = {}
        for name in names:
            if name in PARENT:
                self.futures[name] = self.pool.submit(self.changed, self.futures[PARENT[name]], JOBS[name],
                                                      directories[name])
            else:
                copies = [directories[child] for child in names if PARENT.get(child) == name]
                self.futures[name] = self.pool.submit(self.built_and_copied, JOBS[name], directories[name], copies)

    @staticmethod
    def built_and_copied(job, directory, copies):
        result = job(directory)
        for copy in copies:
            shutil.copytree(directory, copy, symlinks=True)  # with build/: a shorter rebuild
        return result

    @staticmethod
    def changed(parent, job, directory):
        parent.result()  # the copy is there
        return job(directory)

    def result(self, name):
        return self.futures[name].result()


@pytest.fixture(scope="module")
def background(request, tmp_path_factory):
    jobs = Background(request, tmp_path_factory)
    yield jobs
    jobs.pool.shutdown(cancel_futures=True)  # waits for a running one: none runs into the next module


def test_every_template_file_is_written_renamed(project):
    directory, _ = project
    written = sorted(str(p.relative_to(directory)) for p in directory.rglob("*")
                     if p.is_file() and not new_op.SKIPPED & set(p.relative_to(directory).parts))
    expected = sorted(str(p.relative_to(new_op.TEMPLATE)).replace("scaled_row_sum", NAME)
                      for p in new_op.template_files())
    assert written == expected


def test_no_trace_of_the_template_or_this_repository(project):
    directory, _ = project
    for path in directory.rglob("*"):
        if path.is_file() and not new_op.SKIPPED & set(path.relative_to(directory).parts) and path.suffix in (".py", ".cc", ".cpp", ".h", ".md", ""):
            text = path.read_text().replace("my_ops::ball_query", "")  # the course's op, named in the README
            assert not TEMPLATE_WORDS.search(text), path
            assert str(REPOSITORY) not in text, path
            # customops may be named (the optional check, the headers' cache), never imported
            assert not re.search(r"^\s*(import|from) customops", text, re.MULTILINE), path
    assert "TORCH_LIBRARY(geo, m)" in (directory / "csrc" / "torch_binding.cpp").read_text()
    assert 'Ort::CustomOpDomain d("geo")' in (directory / "csrc" / "ort_op.cc").read_text()
    assert "struct BallSumOp" in (directory / "csrc" / "ort_op.cc").read_text()


def test_generated_project_builds_and_passes_its_tests(project):
    assert passed(project[1]) > 30


def break_the_sum(broken):
    header = broken / "csrc" / f"{NAME}.h"
    right = "sum[i] = static_cast<T>(scale * total);"
    assert right in header.read_text()
    header.write_text(header.read_text().replace(right, "sum[i] = static_cast<T>(scale * total) + 1;"))
    return make_test(broken)


def test_generated_tests_fail_when_the_kernel_is_wrong(wrong_kernel):
    done = wrong_kernel
    assert done.returncode != 0
    failed = set(re.findall(r"^FAILED tests/(\w+)\.py::(\w+)", done.stdout, re.MULTILINE))
    assert {("test_torch_op", "test_equals_reference"), ("test_ort", "test_ort_equals_pytorch_and_the_reference"),
            ("test_host", "test_host_runs_the_model"), ("test_check", "test_customops_check_passes")} <= failed, \
        done.stdout[-3000:]


def abort_the_ort_op(broken):
    source = broken / "csrc" / "ort_op.cc"
    marker = "      const int64_t cols = sizes.at(\"cols\");\n"
    assert marker in source.read_text()
    # cols: the size the large samples grow (the op reduces it), beyond the small ones' 9
    source.write_text(source.read_text().replace(marker, marker + "      if (cols > 100) std::abort();\n"))
    return make_test(broken)


def test_a_crash_of_the_ort_op_fails_one_named_case(crashing_kernel):
    """ORT runs in child processes: a segfault fails the cases that reach it,
    each naming the signal, and every other test still runs."""
    done = crashing_kernel
    failed = re.findall(r"^FAILED (\S+)", done.stdout, re.MULTILINE)
    # the cases with cols > 100: the large samples, the check (which grows them), concurrent runs
    # and test_parallel (inputs sized to take milliseconds)
    assert failed and all(any(word in case for word in ("large", "test_check", "concurrent", "test_parallel"))
                          for case in failed), failed
    assert "onnxruntime died of signal 6" in done.stdout
    assert re.search(r"\d+ failed, \d+ passed", done.stdout)


def share_the_total(broken):
    header = broken / "csrc" / f"{NAME}.h"
    loop = "  parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {\n"
    total = "      double total = 0;  // double: the sum of many floats keeps its precision\n"
    text = header.read_text()
    assert loop in text and total in text
    header.write_text(text.replace(total, "").replace(loop, loop + "    double total = 0;\n"))
    built = make(broken)
    assert built.returncode == 0, built.stderr[-2000:]
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_parallel.py"],
                          cwd=broken, capture_output=True, text=True)


def test_the_parallel_test_fails_when_items_share_a_total(shared_total):
    """A total carried across the rows of one range (a write items share): the
    outputs then depend on where parallel_for splits, and the project's
    test_parallel sees it at 1 and 2 threads (at::parallel_for splits by thread count)."""
    done = shared_total
    failed = set(re.findall(r"^FAILED tests/test_parallel\.py::(\w+)", done.stdout, re.MULTILINE))
    assert failed == {"test_torch_same_outputs_at_1_and_2_threads",
                      "test_ort_same_outputs_at_1_and_2_threads_as_torch"}, done.stdout[-3000:]


def test_make_bench_times_both_runtimes_at_1_and_n_threads(project):
    directory, _ = project
    done = make(directory, "bench")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    table = (directory / "build" / "bench.md").read_text()
    assert table in done.stdout
    counts = sorted({1, len(os.sched_getaffinity(0))})
    for runtime in ("ONNX Runtime", "PyTorch"):
        for n in counts:
            assert re.search(rf"^\| {runtime} \| {n} \| [\d.]+ \| [\d.]+x \|$", table, re.MULTILINE), table
    assert f"Outputs identical at {' and '.join(map(str, counts))} threads in both runtimes" in table
    assert (directory / "build" / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_make_wheel_runs_next_to_another_torch_and_onnxruntime(project, tmp_path):
    """`make wheel`: one wheel whose import name is the namespace; installed next to
    torch 2.13.0+cpu and onnxruntime 1.24.4 (customops.envs), the torch op and the
    ORT library (get_library_path()) run the exported model's inputs and agree."""
    directory, _ = project
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    done = subprocess.run(["make", "wheel", f"PYTHON={sys.executable}"], cwd=directory, capture_output=True,
                          text=True, env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    wheel, = (directory / "build" / "dist").glob("*.whl")
    assert wheel.name.startswith(f"{NAMESPACE}-0.1.0-") and wheel.name.endswith("linux_x86_64.whl")
    python = torch_python("2.13.0+cpu", "onnxruntime==1.24.4")
    site = tmp_path / "site"
    subprocess.run([python, "-m", "pip", "install", "--quiet", "--no-deps", "--target", site, wheel], check=True)
    exported = runpy.run_path(str(directory / "schema.py"))["EXPORTED"]
    user = f"""import sys, numpy as np, onnxruntime as ort, torch, {NAMESPACE}
x = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
weight = np.linspace(0.5, 2, 4, dtype=np.float32)
by_torch = torch.ops.{NAMESPACE}.{NAME}(torch.from_numpy(x), torch.from_numpy(weight), **{exported!r})
options = ort.SessionOptions()
options.register_custom_ops_library({NAMESPACE}.get_library_path())
session = ort.InferenceSession(sys.argv[1], options, providers=["CPUExecutionProvider"])
by_ort = session.run(None, {{"x": x, "weight": weight}})
print(torch.__version__, ort.__version__, len(by_ort) == len(by_torch) and
      all(np.allclose(o, t.numpy(), atol=1e-5) for o, t in zip(by_ort, by_torch)))
"""
    done = subprocess.run([python, "-c", user, directory / "build" / f"{NAME}_float32.onnx"], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(site)}, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["2.13.0+cpu", "1.24.4", "True"]

# (radius_graph's kinds, a 2-D data-dependent output and an optional input, are every_kind's
# and the FPS project's below: its own project would add minutes, not cases)
def test_a_project_from_a_schema_passes_its_tests_untouched(every_kind):
    directory, done = every_kind
    op = build(EVERY_KIND[0], EVERY_KIND[2], EVERY_KIND[4])
    assert passed(done) > 40
    for dtype in op.dtypes:
        model = onnx.load(directory / "build" / f"{op.name}_{dtype}.onnx")
        assert [(n.domain, n.op_type) for n in model.graph.node] == [(op.namespace, op.name)]
        assert [a.type for a in model.graph.node[0].attribute] == [
            getattr(onnx.AttributeProto, a.onnx_type) for a in op.attributes]
        assert [[d.dim_param or d.dim_value for d in o.type.tensor_type.shape.dim] for o in model.graph.output] == \
            [t.dims for t in op.outputs]  # E and K as given, never u0
    text = (directory / "README.md").read_text() + (directory / "csrc" / f"{op.name}.h").read_text()
    assert not TEMPLATE_WORDS.search(text.replace("my_ops::ball_query", ""))


# --- the op's domain: sizes within the budget at any rank, group ids, attribute values, Hypothesis ---

FPS = ("pc::farthest_point_sample(Tensor pos, Tensor? batch, float ratio, bool random_start=False) -> Tensor idx",
       "--dtypes", "float32,float64,float16", "--shapes", "pos: T[n,3]; batch: int64[n] sorted; idx: int64[m]")
# One schema per rank, every size carried by the output (so every size grows), and one
# whose ranks 1 to 5 meet, where the output carries some sizes only (n, k and z are reduced).
RANKS = [(f"lab::rank{r}(Tensor x, float s=1.0) -> Tensor y", "--dtypes", "float64", "--shapes",
          f"x: T[{', '.join(f'd{i}' for i in range(r))}]; y: T[{', '.join(f'd{i}' for i in range(r))}]")
         for r in range(1, 6)]
MIXED = ("lab::mixed(Tensor a1, Tensor a2, Tensor a3, Tensor a4, Tensor a5) -> Tensor y", "--dtypes", "float64",
         "--shapes", "a1: T[n]; a2: T[n, k]; a3: T[b, ch, h]; a4: T[b, ch, h, w]; a5: T[b, ch, z, h, w]; "
                     "y: T[b, ch, h, w]")
# Run in the generated project: its samples and strategies, on their own terms.
DOMAIN_SCRIPT = r'''
import math, sys
import numpy as np
from hypothesis import given, settings
import samples, schema, strategies

rng = np.random.default_rng(0)
grown = set()
for _ in range(40):
    arrays = samples.sample(schema.DTYPES[0], rng, largest=samples.LARGE)
    sizes = {}
    for name, (_, dims) in schema.INPUTS.items():
        sizes.update({d: n for d, n in zip(dims, arrays[name].shape) if isinstance(d, str)})
    counts = [a.size for a in arrays.values()] + [math.prod(sizes[d] for d in dims)
                                                   for _, dims in schema.OUTPUTS.values()
                                                   if all(d in sizes for d in dims)]
    assert max(counts) <= samples.MAX_TENSOR and sum(counts) <= samples.MAX_SAMPLE, (sizes, counts)
    grown |= {d for d, n in sizes.items() if n > samples.SMALL}
assert grown and grown <= set(schema.GROWN), (grown, schema.GROWN)
for name in schema.GROUP_IDS:
    seen = set()
    for pattern in samples.ID_PATTERNS:
        ids = samples.group_ids(7, pattern, rng)
        assert len(ids) == 7 and ids[0] >= 0 and np.all(np.diff(ids) >= 0), (pattern, ids)
        present = set(ids.tolist())
        if len(present) == 1:
            seen.add("one")
        if len(present) == 7:
            seen.add("each")
        if set(range(ids[-1] + 1)) - present - {0}:
            seen.add("gap")
        if ids[0] > 0:
            seen.add("empty_first")
    assert seen == {"one", "each", "gap", "empty_first"}, seen

@settings(max_examples=40, deadline=None, database=None)
@given(case=strategies.cases())
def drawn(case):
    dtype, arrays, attributes = case
    assert all(a.size <= strategies.MAX_ELEMENTS for a in arrays.values())
    assert set(arrays) >= set(schema.INPUTS) - set(schema.OPTIONAL)
    assert all(attributes[k] in schema.VALUES[k] or attributes[k] != attributes[k] for k in schema.VALUES)
    for name in schema.GROUP_IDS:
        if name in arrays:
            assert np.all(np.diff(arrays[name]) >= 0) and np.all(arrays[name] >= 0)
    pasted = {}
    exec(strategies.as_code(dtype, arrays, attributes) + "\ntest_found_by_hypothesis()",
         {"np": np, "check_case": lambda *args: pasted.update(args=args)})
    again_dtype, again, again_attributes = pasted["args"]
    assert again_dtype == dtype and again.keys() == arrays.keys()
    assert all(again[k].dtype == arrays[k].dtype and np.array_equal(again[k], arrays[k]) for k in arrays)
    assert repr(again_attributes) == repr(attributes)

drawn()
print("ok")
'''


@pytest.mark.parametrize("args", [*RANKS, MIXED, FPS, EVERY_KIND],
                         ids=[f"rank{r}" for r in range(1, 6)] + ["mixed", "fps", "every_kind"])
def test_samples_stay_within_the_budget_at_every_rank(tmp_path, args):
    """The large samples grow only GROWN sizes and hold at most MAX_TENSOR elements per
    tensor and MAX_SAMPLE per sample; group ids take each pattern; Hypothesis's cases
    are small, and as_code gives them back as code that runs."""
    new_op.generate(args[0], tmp_path, args[2], args[4])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(tmp_path / "tests")])}
    done = subprocess.run([sys.executable, "-c", DOMAIN_SCRIPT], cwd=tmp_path, capture_output=True, text=True,
                          env=env, timeout=600)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stdout[-3000:] + done.stderr[-3000:]


def test_grown_sizes_are_those_of_group_ids_and_reductions():
    assert grown(build(MIXED[0], "float64", MIXED[4])) == ["n", "k", "z"]
    assert grown(build(FPS[0], "float32", FPS[4])) == ["n"]
    assert grown(build(RANKS[3][0], "float64", RANKS[3][4])) == ["d0", "d1", "d2", "d3"]


def test_attribute_values_cover_each_kind():
    """Each kind over its domain, the exported value first (Hypothesis shrinks toward it)."""
    values = {a.name: domain(a) for a in build(EVERY_KIND[0]).attributes}
    assert values["flag"] == [True, False]
    assert values["k"] == [3, 2, 4]
    assert values["alpha"][:4] == [0.25, 0.0, -0.25, float("inf")] and values["alpha"][4] != values["alpha"][4]
    assert values["mode"] == ["sum", ""]
    assert values["dims"] == [[1, 2], [], [1]] and values["weights"] == [[0.5], [], [0.5, 0.5]]
    fps = {a.name: domain(a) for a in build(FPS[0], "float32", FPS[4]).attributes}
    assert fps["random_start"] == [False, True] and fps["ratio"][0] == EXAMPLE_VALUE["float"]
    text = "\n".join(schema_module(build(EVERY_KIND[0])))
    assert '"alpha": [0.25, 0.0, -0.25, float("inf"), float("nan")]' in text  # valid Python


def test_the_translation_defaults_a_none_optional_input():
    """torch leaves out an argument equal to its default: the exporter then calls the
    translation without it, which needs a default (the others get None passed)."""
    lines = "\n".join(translation(build(EVERY_KIND[0])))
    assert "w: Optional[FLOAT], bias: Optional[FLOAT] = None, alpha: float = 0.25" in lines


def timed_make_test(directory):
    """The MIXED project generated, and make_test under /usr/bin/time: (its result,
    seconds, peak resident KiB of one process)."""
    assert run_new_op(MIXED[0], directory, *MIXED[1:]).returncode == 0
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    done = subprocess.run(["/usr/bin/time", "-f", "time %e %M", "make", "test", f"PYTHON={sys.executable}"],
                          cwd=directory, capture_output=True, text=True, env=env)
    seconds, peak = done.stderr.strip().splitlines()[-1].split()[1:]
    return done, float(seconds), int(peak)


def test_a_project_of_ranks_1_to_5_passes_within_memory(mixed):
    """Sizes within the budget: the whole `make test` (build included) of an op with
    inputs of ranks 1 to 5 stays under 2 GiB in every process.  Its time is printed
    (the machine's load decides it, and another project builds beside it here;
    docs/new_op_checklist.md gives one measured)."""
    done, seconds, peak = mixed
    assert passed(done) > 30
    print(f"make test of {MIXED[0]}: {seconds:.0f} s, peak {peak / 1024:.0f} MiB")
    assert peak < 2 * 1024 * 1024, peak


def install_math(directory, bug=""):
    """The user's two files of tests/new_op_fps written into a generated FPS project,
    with ``bug``: "bool" ignores random_start, "empty" divides by an empty group's size."""
    header = directory / "csrc" / "farthest_point_sample.h"
    math = (REPOSITORY / "tests" / "new_op_fps" / "farthest_point_sample.h").read_text()
    if bug == "bool":
        math = math.replace("(random_start ? 7919 : 0) % size", "0")
    if bug == "empty":
        math = math.replace("    if (size == 0) continue;\n", "").replace("(random_start ? 7919 : 0) % size",
                                                                         "(random_start ? 7919 : n) % size")
    assert math != (REPOSITORY / "tests" / "new_op_fps" / "farthest_point_sample.h").read_text() or not bug
    text = header.read_text()
    start = text.index("\n\n", text.index("#include <vector>")) + 2  # the placeholder, or math installed before
    header.write_text(text[:start] + math + text[text.index("// </schema:math>"):])
    reference = (REPOSITORY / "tests" / "new_op_fps" / "reference.py").read_text()
    text = (directory / "reference.py").read_text().replace("import numpy as np", "import math\n\nimport numpy as np")
    start = text.index("# <schema:reference>\n") + len("# <schema:reference>\n")
    (directory / "reference.py").write_text(text[:start] + reference[reference.index("def reference"):]
                                            + text[text.index("# </schema:reference>"):])




def test_fps_passes_with_the_model_without_its_optional_input(fps_project):
    directory, done = fps_project
    assert passed(done) > 100
    for route in ("", "_legacy"):
        model = onnx.load(directory / "build" / f"farthest_point_sample_float32{route}_without_batch.onnx")
        assert [list(n.input) for n in model.graph.node] == [["pos"]] and len(model.graph.input) == 1
    for test in ("test_check.py::test_customops_check_passes[float32-dynamo-without_batch]",
                 "test_host.py::test_host_runs_the_model[float32-dynamo-without_batch]",
                 "test_ort.py::test_ort_equals_pytorch_and_the_reference[large-float32-dynamo-without_batch]"):
        assert test in collected(directory), test


def collected(directory):
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "tests"], cwd=directory,
                          capture_output=True, text=True)
    return done.stdout


def fps_domain_tests(broken, bug):
    """The FPS project's math with ``bug``, built: its tests of the op's domain."""
    install_math(broken, bug)
    assert make(broken).returncode == 0
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "tests/test_domain.py", "tests/test_torch_op.py",
                           "tests/test_ort.py"], cwd=broken, capture_output=True, text=True)


@pytest.mark.parametrize("bug, failing", [
    ("fps_bool", {("test_domain", "test_each_attribute_value_in_pytorch_and_ort")}),
    ("fps_empty", {("test_torch_op", "test_each_pattern_of_group_ids"),
                   ("test_domain", "test_pytorch_on_drawn_cases")}),
])
def test_fps_fails_its_tests_on_a_bug_of_its_domain(background, bug, failing):
    """A bug only on the non-default bool, and a division by an empty group's size
    (SIGFPE): the project's own tests of the op's domain in each runtime fail, naming the
    signal, and the run goes on (what customops.check finds is its own tests' job)."""
    done = background.result(bug)
    assert done.returncode != 0 and re.search(r"\d+ failed, \d+ passed", done.stdout), done.stdout[-3000:]
    failed = set(re.findall(r"^FAILED tests/(\w+)\.py::(\w+)", done.stdout, re.MULTILINE))
    assert failing <= failed, done.stdout[-3000:]
    if bug == "fps_empty":  # Hypothesis shrinks the crash and prints it as a test
        assert "the PyTorch op died of signal 8 (SIGFPE)" in done.stdout
        assert "onnxruntime died of signal 8" in done.stdout
        assert "def test_found_by_hypothesis():" in done.stdout
    if bug == "fps_bool":
        assert "test_each_attribute_value_in_pytorch_and_ort[random_start=True]" in done.stdout
def test_the_ort_library_builds_with_the_cmake_example(project, tmp_path):
    """examples/cmake_ort_library (notebook 22, section 3) builds the project's ORT
    library from csrc/ort_op.cc; the project's own ORT tests pass on that build."""
    directory, _ = project
    copy = tmp_path / "cmake"
    shutil.copytree(directory, copy, symlinks=True)
    library = copy / "build" / f"lib{NAME}_ort.so"
    library.unlink()
    cmake_build = tmp_path / "cmake_build"
    for command in (["-S", REPOSITORY / "examples" / "cmake_ort_library", "-B", cmake_build, f"-DOP_NAME={NAME}_ort",
                     f"-DOP_SOURCES={copy / 'csrc' / 'ort_op.cc'}", f"-DORT_INCLUDE_DIR={customops.headers.include_dir()}"],
                    ["--build", cmake_build]):
        done = subprocess.run(["cmake", *map(str, command)], capture_output=True, text=True)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    shutil.copy(cmake_build / library.name, library)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_ort.py"],
                          cwd=copy, capture_output=True, text=True)
    assert passed(done) > 10


# The background jobs, each a function of its project's directory, in the order they start;
# a module fixture of each name gives its result.
JOBS = {
    "project": lambda directory: generated(directory, OP),  # the template's op renamed (NS::NAME alone)
    # an optional input, a bool attribute, sorted group ids and a data-dependent size
    "fps_project": lambda directory: generated(directory, *FPS, math=True),
    "every_kind": lambda directory: generated(directory, *EVERY_KIND),
    "mixed": timed_make_test,
    "wrong_kernel": break_the_sum,
    "crashing_kernel": abort_the_ort_op,
    "shared_total": share_the_total,
    "fps_bool": lambda directory: fps_domain_tests(directory, "bool"),
    "fps_empty": lambda directory: fps_domain_tests(directory, "empty"),
}
PARENT = {"wrong_kernel": "project", "crashing_kernel": "project", "shared_total": "project",
          "fps_bool": "fps_project", "fps_empty": "fps_project"}


def job_fixture(name):
    return pytest.fixture(scope="module", name=name)(lambda background: background.result(name))


for _name in JOBS:
    globals()[_name] = job_fixture(_name)
