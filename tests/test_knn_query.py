"""knn_query: both bindings against a float64 brute force and scipy's cKDTree."""

import numpy as np
import pytest
import torch
from scipy.spatial import cKDTree

import customops
from customops.ort import session
from exporting import verify
from helpers import feeds, random_clouds, single_node_model
from optable import OPS, tensors

OP = OPS["knn_query"]
SAMPLES = OP.samples(np.random.default_rng(0))


def run_torch(nsample, xyz, offset, new_xyz=None, new_offset=None, noncontiguous=()):
    inputs = dict(xyz=xyz, offset=offset, new_xyz=new_xyz, new_offset=new_offset)
    idx, dist = OP.python(tensors(inputs, noncontiguous), {"nsample": nsample})
    return idx.numpy(), dist.numpy()


def run_ort(nsample, xyz, offset, new_xyz=None, new_offset=None):
    inputs = {"xyz": xyz, "offset": offset, "new_xyz": new_xyz, "new_offset": new_offset}
    model = single_node_model("knnquery", inputs, ["idx", "dist"], nsample=nsample)
    return session(model).run(None, feeds(inputs))


@pytest.mark.parametrize("binding,sample", [
    pytest.param(binding, s, id=f"{binding}-{s.id}") for s in SAMPLES for binding in ("torch", "ort")
    if binding == "torch" or OP.runs_in_ort(s.inputs)])
def test_matches_brute_force(binding, sample):
    """Every sample of the table; int64 offsets in PyTorch only (the ONNX
    contract is float32 points, int32 offsets)."""
    x, nsample = sample.inputs, sample.attrs["nsample"]
    args = (nsample, x["xyz"], x["offset"], x["new_xyz"], x["new_offset"])
    idx, dist = run_torch(*args, noncontiguous=sample.noncontiguous) if binding == "torch" \
        else run_ort(*args)
    ref_idx, ref_dist = OP.reference(x, sample.attrs)
    np.testing.assert_array_equal(idx, ref_idx)
    np.testing.assert_allclose(dist, ref_dist, rtol=1e-6, atol=0)
    assert idx.dtype == np.int32 and dist.dtype == np.float32


@pytest.mark.parametrize("run", [run_torch, run_ort], ids=["torch", "ort"])
@pytest.mark.parametrize("kind", ["uniform", "clustered"])
def test_matches_ckdtree_on_large_clouds(rng, run, kind):
    n, m, k = 40_000, 5_000, 16
    if kind == "uniform":
        xyz = rng.random((n, 3), dtype=np.float32)
    else:  # 16 tight blobs: a grid sized for uniform data would be slow here
        centres = rng.random((16, 3))
        xyz = (centres[rng.integers(0, 16, n)] + 0.01 * rng.standard_normal((n, 3)))
        xyz = xyz.astype(np.float32)
    queries = xyz[rng.choice(n, m, replace=False)] + np.float32(1e-3)
    idx, dist = run(k, xyz, np.array([n], np.int32), queries, np.array([m], np.int32))
    ref_dist, ref_idx = cKDTree(xyz).query(queries, k=k)
    np.testing.assert_array_equal(idx, ref_idx)
    np.testing.assert_allclose(dist, ref_dist, rtol=1e-6)


@pytest.mark.parametrize("run", [run_torch, run_ort], ids=["torch", "ort"])
def test_one_nan_point_is_refused_not_half_searched(rng, run):
    """One NaN row among 2,000 uniform points used to poison its tree's
    boxes: about half the queries that should not change returned other
    neighbours.  The contract is now cKDTree's: non-finite points are refused
    (csrc/kernels/knn_query.h), and the other rows alone match cKDTree."""
    xyz = rng.random((2000, 3), dtype=np.float32)
    xyz[1234, 1] = np.nan
    offset = np.array([2000], np.int32)
    error = RuntimeError if run is run_torch else Exception
    with pytest.raises(error, match=r"knn_query: xyz must be finite \(no NaN or inf\), got nan "
                                    r"at xyz\[1234, 1\]"):
        run(8, xyz, offset)
    with pytest.raises(ValueError, match="must be finite"):  # the reference refuses it too
        cKDTree(xyz)
    clean = np.delete(xyz, 1234, axis=0)
    idx, dist = run(8, clean, np.array([1999], np.int32))
    ref_dist, ref_idx = cKDTree(clean).query(clean, k=8)
    np.testing.assert_array_equal(idx, ref_idx)
    np.testing.assert_allclose(dist, ref_dist, rtol=1e-6)


@pytest.mark.parametrize("run", [run_torch, run_ort], ids=["torch", "ort"])
@pytest.mark.parametrize("name", ["xyz", "new_xyz"])
def test_non_finite_message_names_the_first_of_many(rng, run, name):
    """The check runs in blocks on the thread pool; whatever block finishes
    first, the message names the first bad coordinate in memory order."""
    xyz = rng.random((50_000, 3), dtype=np.float32)
    queries = rng.random((40_000, 3), dtype=np.float32)
    points = xyz if name == "xyz" else queries
    points[39_000, 2], points[20_001, 0], points[7, 1] = np.nan, -np.inf, np.inf
    with pytest.raises(RuntimeError if run is run_torch else Exception,
                       match=rf"{name} must be finite \(no NaN or inf\), got inf at "
                             rf"{name}\[7, 1\]"):
        run(4, xyz, np.array([50_000], np.int32), queries, np.array([40_000], np.int32))


@pytest.mark.parametrize("run", [run_torch, run_ort], ids=["torch", "ort"])
# Three k-best paths (csrc/kernels/knn/nearest.h): blend up to k = 16,
# sorted up to 128, heap beyond.
@pytest.mark.parametrize("nsample", [16, 100, 200], ids=["blend", "sorted", "heap"])
def test_matches_brute_force_where_density_jumps(rng, run, nsample):
    """Each search starts from a guess made from the previous query's k-th
    distance; queries stepping from a tight blob into sparse space (and onto
    exact duplicates, where distances tie) hold fewer than k points within
    that guess and must search again without it."""
    blob = 0.5 + 1e-3 * rng.standard_normal((1500, 3))
    sparse = rng.random((1500, 3))
    duplicates = np.repeat(rng.random((4, 3)), 50, axis=0)
    xyz = np.concatenate([blob, sparse, duplicates]).astype(np.float32)
    queries = np.concatenate([xyz[rng.choice(len(xyz), 1000)], rng.random((1000, 3))])
    queries = queries.astype(np.float32)
    offset, new_offset = np.array([len(xyz)], np.int32), np.array([len(queries)], np.int32)
    idx, dist = run(nsample, xyz, offset, queries, new_offset)
    ref_idx, ref_dist = OP.reference(
        {"xyz": xyz, "offset": offset, "new_xyz": queries, "new_offset": new_offset},
        {"nsample": nsample})
    np.testing.assert_array_equal(idx, ref_idx)
    np.testing.assert_allclose(dist, ref_dist, rtol=1e-6, atol=0)


def brute_force(nsample):
    """The reference, called as an exported KNN model is: xyz, offset[, new_xyz, new_offset]."""
    return lambda *arrays: OP.reference(
        {"new_xyz": None, "new_offset": None, **dict(zip(OP.input_names, arrays))},
        {"nsample": nsample})


class KNN(torch.nn.Module):
    def __init__(self, nsample):
        super().__init__()
        self.nsample = nsample

    def forward(self, xyz, offset, new_xyz=None, new_offset=None):
        return customops.knn_query(self.nsample, xyz, offset, new_xyz, new_offset)


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
@pytest.mark.parametrize("with_queries", [False, True], ids=["self", "queries"])
def test_export_runs_in_ort(rng, dynamo, with_queries):
    """Dynamic sizes: exported once, compared with torch on three input sets."""
    def sample(sizes):
        xyz, offset = random_clouds(rng, sizes)
        args = [xyz, offset]
        if with_queries:
            args += list(random_clouds(rng, [s // 2 + 1 for s in sizes]))
        return tuple(torch.from_numpy(a) for a in args)

    args, *more = sample([40, 25]), sample([90, 3]), sample([7, 60])
    names = ["xyz", "offset", "new_xyz", "new_offset"][:len(args)]
    if dynamo:
        dims = {"xyz": {0: torch.export.Dim("n")}, "new_xyz": {0: torch.export.Dim("m")}}
        kwargs = {"dynamic_shapes": tuple(dims.get(name) for name in names)}
    else:
        kwargs = {"dynamic_axes": {"xyz": [0], "new_xyz": [0], "idx": [0], "dist": [0]},
                  "output_names": ["idx", "dist"]}
    model = verify(KNN(8), args, dynamo=dynamo, more_args=more, input_names=names,
                   reference=brute_force(8), **kwargs)
    (node,) = model.graph.node
    assert (node.domain, node.op_type, len(node.input), len(node.output)) == (
        "custom", "knnquery", len(names), 2)
    assert [(a.name, a.i) for a in node.attribute] == [("nsample", 8)]


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
@pytest.mark.parametrize("with_queries", [False, True], ids=["self", "queries"])
def test_int64_offsets_export_with_a_cast(rng, dynamo, with_queries):
    """PyTorch takes int64 offsets; the ONNX node takes int32, so both exporters
    put a Cast in front of it (and only then)."""
    xyz, offset = random_clouds(rng, [30, 22])
    args = [torch.from_numpy(xyz), torch.from_numpy(offset).long()]
    if with_queries:
        q, qo = random_clouds(rng, [5, 9])
        args += [torch.from_numpy(q), torch.from_numpy(qo).long()]
    model = verify(KNN(6), tuple(args), dynamo=dynamo, reference=brute_force(6))
    ops = [n.op_type for n in model.graph.node]
    assert sorted(ops) == sorted(["Cast"] * (1 + with_queries) + ["knnquery"]), ops
    offset_input = model.graph.input[1].type.tensor_type.elem_type
    assert offset_input == 7  # int64 in the graph's signature, cast inside


def test_export_refuses_float64_points_while_tracing():
    """The fake kernel checks dtypes: torch.export fails at export time, with
    the message the C++ kernel gives, not later in ORT."""
    xyz = torch.zeros(10, 3, dtype=torch.float64)
    offset = torch.tensor([4, 10], dtype=torch.int32)
    with pytest.raises(Exception, match=r"knn_query: xyz must be Float, got Double") as raised:
        torch.export.export(KNN(3), (xyz, offset))
    with pytest.raises(RuntimeError) as real:
        customops.knn_query(3, xyz, offset)
    assert str(real.value) in str(raised.value)


# --- the gradient of dist -------------------------------------------------------


def reference_dist(xyz, new_xyz, idx):
    """dist recomputed by plain torch ops from the kernel's idx (padding left
    at 0): torch's own autograd of it is the reference gradient."""
    queries = xyz if new_xyz is None else new_xyz
    return torch.linalg.vector_norm(queries.unsqueeze(1) - xyz[idx.long().clamp(min=0)], dim=2)


@pytest.mark.parametrize("with_queries", [False, True], ids=["self", "queries"])
def test_dist_gradient_matches_torch_autograd_in_float64(rng, with_queries):
    """Our backward against torch's autograd of the same distances in float64,
    with a cloud smaller than nsample (padding gets no gradient)."""
    xyz, offset = (torch.from_numpy(a) for a in random_clouds(rng, [40, 5, 25]))
    new_xyz, new_offset = ((torch.from_numpy(a) for a in random_clouds(rng, [7, 3, 9]))
                           if with_queries else (None, None))
    points = [t for t in (xyz, new_xyz) if t is not None]
    leaves = [t.requires_grad_() for t in points]
    leaves64 = [t.detach().double().requires_grad_() for t in points]
    idx, dist = customops.knn_query(8, xyz, offset, new_xyz, new_offset)
    assert idx.grad_fn is None and not idx.requires_grad and dist.requires_grad
    real = idx >= 0                       # a loss over the real neighbours, not the padding
    assert not real.all()
    weight = torch.from_numpy(rng.standard_normal(dist.shape))
    ours = torch.autograd.grad((dist[real].double() * weight[real]).sum(), leaves)
    reference = reference_dist(leaves64[0], leaves64[1] if with_queries else None, idx)
    expected = torch.autograd.grad((reference[real] * weight[real]).sum(), leaves64)
    for got, want in zip(ours, expected):
        assert got.dtype == torch.float32
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)
        assert want.abs().max() > 0.1


def gradcheck_clouds(rng, with_queries, tries=10_000):
    """Clouds on which finite differences with a 1e-3 step judge the first and
    second derivatives of dist (nsample 4): no two distances from one query to
    the points of its cloud within 0.02, so the step can change neither the
    neighbours' order nor which 4 are kept (a 5th point 0.0006 behind the 4th
    failed 15 seeds in 200), and every nonzero distance at least 0.1 (the
    second derivative of |x| grows as 1/|x|: a query 0.01 from a point made
    gradgradcheck misjudge it by 5%).  Drawn from ``rng`` only, so the case is
    the same whatever ran before."""
    new_offset = torch.tensor([2, 3], dtype=torch.int32) if with_queries else None
    for _ in range(tries):
        xyz, offset = (torch.from_numpy(a) for a in random_clouds(rng, [6, 4]))
        new_xyz = torch.from_numpy(rng.random((3, 3), np.float32)) if with_queries else None
        every = customops.knn_query(6, xyz, offset, new_xyz, new_offset)[1]  # all, sorted
        others = every if with_queries else every[:, 1:]        # a self-query's first is itself, at 0
        if every.diff(dim=1).nan_to_num(nan=1.0).min() > 0.02 and others.min() >= 0.1:  # inf - inf: nan
            return xyz, offset, new_xyz, new_offset
    raise AssertionError(f"no valid cloud in {tries} draws")


def check_gradients(rng, with_queries):
    """gradcheck and gradgradcheck (finite differences, 1e-3 step) of dist on
    gradcheck_clouds, for both entry points (the op and KNNQuery); the double
    backward's output gradients come from ``rng`` too (gradgradcheck would draw
    them from torch's global generator)."""
    xyz, offset, new_xyz, new_offset = gradcheck_clouds(rng, with_queries)
    leaves = tuple(t.requires_grad_() for t in (xyz, new_xyz) if t is not None)
    grad_dist = torch.from_numpy(rng.standard_normal((len(leaves[-1]), 4), np.float32))
    for knn in (torch.ops.customops.knn_query, customops.knn_query):
        def dist(*points):
            return knn(4, points[0], offset, points[1] if with_queries else None, new_offset)[1]
        assert torch.autograd.gradcheck(dist, leaves, eps=1e-3, atol=1e-3, rtol=1e-2)
        assert torch.autograd.gradgradcheck(dist, leaves, grad_dist.requires_grad_(),
                                            eps=1e-3, atol=1e-3, rtol=1e-2)


@pytest.mark.filterwarnings("ignore:Input #:UserWarning")  # float32 inputs, on purpose
@pytest.mark.parametrize("with_queries", [False, True], ids=["self", "queries"])
def test_gradcheck(rng, with_queries):
    """The forward takes float32 only (no float64 gradcheck): finite differences
    on clouds where they are valid.  Replayable for any seed:
    ``check_gradients(np.random.default_rng(seed), with_queries)``."""
    check_gradients(rng, with_queries)


def test_gradient_is_zero_not_nan_where_points_coincide():
    """A query on a point of the cloud (dist 0; |x| has no derivative at 0), and
    a self-query, where every point is its own first neighbour."""
    xyz = torch.tensor([[0.0, 0, 0], [1, 0, 0], [0, 2, 0]], requires_grad=True)
    offset = torch.tensor([3], dtype=torch.int32)
    new_xyz = torch.tensor([[1.0, 0, 0]], requires_grad=True)   # on point 1
    _, dist = customops.knn_query(2, xyz, offset, new_xyz, offset.new_tensor([1]))
    dist.sum().backward()
    # only the second neighbour (point 0, at distance 1 along -x) pulls
    assert new_xyz.grad.tolist() == [[1.0, 0.0, 0.0]]
    assert xyz.grad.tolist() == [[-1.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
    xyz.grad = None
    _, dist = customops.knn_query(1, xyz, offset)                # each point finds itself
    dist.sum().backward()
    assert (dist == 0).all() and xyz.grad.tolist() == [[0.0] * 3] * 3


def test_opcheck_with_gradients(rng):
    """opcheck without its AOT test, whose harness sums the outputs into the
    first one's dtype (idx: int) and fails on any op with an int output first
    (torch 2.14.1); the next test compiles a training step instead."""
    xyz, offset = (torch.from_numpy(a) for a in random_clouds(rng, [20, 12]))
    torch.library.opcheck(torch.ops.customops.knn_query.default,
                          (5, xyz.requires_grad_(), offset, None, None),
                          test_utils=("test_schema", "test_autograd_registration", "test_faketensor"))
    idx, dist = torch.ops.customops.knn_query.default(5, xyz, offset, None, None)
    ref_idx, ref_dist = OP.reference({"xyz": xyz.detach().numpy(), "offset": offset.numpy(),
                                      "new_xyz": None, "new_offset": None}, {"nsample": 5})
    np.testing.assert_array_equal(idx.numpy(), ref_idx)
    np.testing.assert_allclose(dist.detach().numpy(), ref_dist, rtol=1e-6)


@pytest.mark.parametrize("knn", [torch.ops.customops.knn_query, customops.knn_query],
                         ids=["op", "KNNQuery"])
def test_compiled_training_step_has_the_gradient(rng, knn):
    """torch.compile (AOT autograd) traces the backward, the op's and KNNQuery's."""
    xyz, offset = (torch.from_numpy(a) for a in random_clouds(rng, [30, 12]))

    def loss(points):
        return knn(4, points, offset)[1].sum()

    eager = torch.autograd.grad(loss(xyz.requires_grad_()), xyz)[0]
    compiled = torch.compile(loss, backend="aot_eager", fullgraph=True)
    got = torch.autograd.grad(compiled(xyz), xyz)[0]
    torch.testing.assert_close(got, eager, rtol=0, atol=0)
    assert eager.abs().max() > 0.1
