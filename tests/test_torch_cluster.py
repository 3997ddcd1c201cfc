"""torch_cluster::grid (seed 002), real and stand-in: the facts notebook 04
states about the operator, and the stand-in's promise to behave like it.

The real package comes from `make torch-cluster` (by hand: .ci/run says when); without it
the tests of the real op skip, and notebook 04 runs on its stand-in.  With
REQUIRE_TORCH_CLUSTER=1 a missing package fails instead.

The stand-in and the real package define the same operator, so they never
share a process: the stand-in runs in a subprocess (its kernel on inputs this
process saved), and notebook 04 runs under nbval with the real package hidden.
"""

import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
try:
    import torch_cluster
except ModuleNotFoundError:
    torch_cluster = None
    if os.environ.get("REQUIRE_TORCH_CLUSTER") == "1":
        raise
needs_real = pytest.mark.skipif(
    torch_cluster is None,
    reason="torch_cluster is not installed (make torch-cluster builds it); notebook 04 ran on its stand-in")

SCHEMA = "torch_cluster::grid(Tensor _0, Tensor _1, Tensor? _2, Tensor? _3) -> Tensor _0"
FAKE_REFUSED = ("We should not register a meta kernel directly to the operator 'torch_cluster::grid', because it "
                "has a CompositeImplicitAutograd kernel in core.")
KEYS = ["CPU", "CUDA", "Meta", "Autograd", "CompositeExplicitAutograd", "CompositeImplicitAutograd"]

# What the subprocess reports about whichever torch_cluster::grid it loaded.
PROBE = """
import pickle, sys
import torch
from torch_cluster_standin import grid_cluster

cases = pickle.load(open(sys.argv[1], "rb"))
facts = {
    "schema": str(torch.ops.torch_cluster.grid.default._schema),
    "kernels": [k for k in %r if torch._C._dispatch_has_kernel_for_dispatch_key("torch_cluster::grid", k)],
    "dump": torch._C._dispatch_dump("torch_cluster::grid"),
    "outputs": [grid_cluster(*case) for case in cases],
}
for name, attempt in [("fake", lambda: torch.library.register_fake("torch_cluster::grid")(lambda *a: None)),
                      ("wrong size", lambda: grid_cluster(torch.zeros(5, 3), torch.ones(2)))]:
    try:
        attempt()
    except RuntimeError as e:
        facts[name] = str(e)
pickle.dump(facts, open(sys.argv[1], "wb"))
""" % KEYS


def grid_reference(pos, size, start=None, end=None):
    """torch_cluster's grid in numpy: voxel coordinates truncated toward zero
    (C++'s toType(kLong), also for points outside [start, end]), numbered x
    fastest with the voxel counts of [start, end]."""
    pos = pos.reshape(len(pos), -1)
    start = pos.min(0) if start is None else start
    end = pos.max(0) if end is None else end
    counts = np.trunc((end - start) / size).astype(np.int64) + 1
    strides = np.concatenate([[1], np.cumprod(counts)[:-1]])
    return (np.trunc((pos - start) / size).astype(np.int64) * strides).sum(1)


def cases():
    """Inputs: 1 to 4 dimensions, float32 and float64, with and without start
    and end, points beyond end and below start, a non-contiguous pos."""
    rng = np.random.default_rng(22)
    out = []
    for dims in (1, 2, 3, 4):
        for dtype in (torch.float32, torch.float64):
            pos = torch.from_numpy(rng.uniform(-2, 6, (300, dims))).to(dtype)
            size = torch.from_numpy(rng.uniform(0.3, 1.5, dims)).to(dtype)
            start, end = torch.full((dims,), -1.0, dtype=dtype), torch.full((dims,), 4.0, dtype=dtype)
            out += [(pos, size, None, None), (pos, size, start, end), (pos, size, None, end)]
    pos = torch.from_numpy(rng.uniform(0, 5, (3, 200)).astype(np.float32)).t()
    out.append((pos, torch.full((3,), 0.7), None, None))
    return out


@pytest.fixture(scope="module")
def standin(tmp_path_factory):
    """The stand-in's facts and outputs on cases(), from a fresh interpreter."""
    path = tmp_path_factory.mktemp("standin") / "io.pickle"
    path.write_bytes(pickle.dumps(cases()))
    subprocess.run([sys.executable, "-c", PROBE, str(path)], check=True, cwd=NOTEBOOKS)
    return pickle.loads(path.read_bytes())


def test_standin_registers_the_operator_as_torch_cluster_does(standin):
    assert standin["schema"] == SCHEMA
    assert standin["kernels"] == ["CompositeImplicitAutograd"]
    assert FAKE_REFUSED in standin["fake"]
    assert standin["wrong size"] == "Input mismatch"


def test_standin_computes_the_reference(standin):
    for case, got in zip(cases(), standin["outputs"]):
        numpy_case = [None if t is None else t.numpy() for t in case]
        np.testing.assert_array_equal(got.numpy(), grid_reference(*numpy_case))


@needs_real
def test_real_op_registration():
    """04, section 4: the schema names the arguments _0.._3, the one kernel is
    CompositeImplicitAutograd (registered by RegisterOperators), register_fake
    refuses it, keywords cannot name the arguments."""
    assert torch_cluster.__version__ == "1.6.3"
    assert str(torch.ops.torch_cluster.grid.default._schema) == SCHEMA
    assert [k for k in KEYS if torch._C._dispatch_has_kernel_for_dispatch_key("torch_cluster::grid", k)] == \
        ["CompositeImplicitAutograd"]
    assert "CompositeImplicitAutograd[alias]: registered by RegisterOperators" in \
        torch._C._dispatch_dump("torch_cluster::grid")
    with pytest.raises(RuntimeError, match="CompositeImplicitAutograd kernel in core") as refused:
        torch.library.register_fake("torch_cluster::grid")(lambda *args: None)
    assert FAKE_REFUSED in str(refused.value)
    with pytest.raises(RuntimeError, match="missing value for argument '_0'"):
        torch.ops.torch_cluster.grid(pos=torch.zeros(4, 3), size=torch.ones(3))


@needs_real
def test_real_op_computes_the_reference():
    for case in cases():
        numpy_case = [None if t is None else t.numpy() for t in case]
        np.testing.assert_array_equal(torch_cluster.grid_cluster(*case).numpy(), grid_reference(*numpy_case))


@needs_real
def test_standin_matches_the_real_op_and_differs_where_it_says(standin):
    """The stand-in's docstring: same schema, kernel key, refusal and outputs;
    different wrong-size message and dispatcher record."""
    for case, got in zip(cases(), standin["outputs"]):
        np.testing.assert_array_equal(got.numpy(), torch_cluster.grid_cluster(*case).numpy())
    with pytest.raises(RuntimeError) as wrong_size:
        torch_cluster.grid_cluster(torch.zeros(5, 3), torch.ones(2))
    assert "INTERNAL ASSERT FAILED" in str(wrong_size.value) and "please report a bug to PyTorch" in str(wrong_size.value)
    assert str(wrong_size.value).endswith("Input mismatch") and standin["wrong size"] == "Input mismatch"
    assert "registered by RegisterOperators" not in standin["dump"] and "torch_cluster_standin.py" in standin["dump"]
    real_dump = torch._C._dispatch_dump("torch_cluster::grid")
    assert [line.split(":")[0] for line in standin["dump"].splitlines()] == \
        [line.split(":")[0] for line in real_dump.splitlines()]
    assert "alias analysis kind: CONSERVATIVE" in standin["dump"] and "alias analysis kind: CONSERVATIVE" in real_dump


@needs_real
def test_standin_refuses_to_load_beside_the_real_op():
    done = subprocess.run([sys.executable, "-c", "import torch_cluster, torch_cluster_standin"],
                          cwd=NOTEBOOKS, capture_output=True, text=True)
    assert done.returncode != 0
    assert "ImportError: torch_cluster::grid is already registered (the real torch_cluster is loaded)" in done.stderr


@needs_real
def test_notebook_04_passes_on_the_standin(tmp_path):
    """A user's `make test` without torch_cluster: nbval runs 04 on the stand-in
    against the outputs stored from the real op.  Here torch_cluster is hidden
    behind a package of that name that raises ModuleNotFoundError, as a missing
    one does."""
    hidden, asked = tmp_path / "torch_cluster", tmp_path / "asked"
    hidden.mkdir()
    (hidden / "__init__.py").write_text(
        f"open({str(asked)!r}, 'w').close()  # the notebook's import reached the hidden package\n"
        "raise ModuleNotFoundError('hidden by tests/test_torch_cluster.py', name='torch_cluster')\n")
    path = [str(tmp_path)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    root = NOTEBOOKS.parent
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "testpaths=",
                           "notebooks/04_torch_library.ipynb"],
                          cwd=root, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:]
    assert " passed" in done.stdout and "failed" not in done.stdout
    assert asked.exists()
