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
@pytest.mark.parametrize("nsample", [16, 200], ids=["sorted", "heap"])
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
                   **kwargs)
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
    model = verify(KNN(6), tuple(args), dynamo=dynamo)
    ops = [n.op_type for n in model.graph.node]
    assert sorted(ops) == sorted(["Cast"] * (1 + with_queries) + ["knnquery"]), ops
    offset_input = model.graph.input[1].type.tensor_type.elem_type
    assert offset_input == 7  # int64 in the graph's signature, cast inside


def test_export_refuses_float64_points_while_tracing():
    """The fake kernel checks dtypes: torch.export fails at export time, with
    the message the C++ kernel gives, not later in ORT."""
    xyz = torch.rand(10, 3, dtype=torch.float64)
    offset = torch.tensor([4, 10], dtype=torch.int32)
    with pytest.raises(Exception, match=r"knn_query: xyz must be Float, got Double") as raised:
        torch.export.export(KNN(3), (xyz, offset))
    with pytest.raises(RuntimeError) as real:
        customops.knn_query(3, xyz, offset)
    assert str(real.value) in str(raised.value)
