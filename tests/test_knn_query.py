"""knn_query: both bindings against a float64 brute force and scipy's cKDTree."""

import numpy as np
import pytest
import torch
from scipy.spatial import cKDTree

import customops
from customops.ort import session
from customops.verify import verify
from helpers import feeds, knn_reference, random_clouds, single_node_model

# (cloud sizes, query cloud sizes or None for "queries are the points", nsample)
CASES = [
    ([1], None, 1),
    ([50], None, 8),
    ([200], [40], 16),
    ([30, 0, 70], [5, 3, 9], 12),      # an empty cloud (its queries get -1 / inf)
    ([5, 9], None, 16),                # nsample larger than every cloud
    ([300, 120, 1, 77], [60, 0, 2, 11], 32),
    ([0], [0], 4),                     # nothing at all
    ([1000], [250], 1),
]


def run_torch(nsample, xyz, offset, new_xyz=None, new_offset=None):
    t = lambda a: None if a is None else torch.from_numpy(a)  # noqa: E731
    idx, dist = customops.knn_query(nsample, t(xyz), t(offset), t(new_xyz), t(new_offset))
    return idx.numpy(), dist.numpy()


def run_ort(nsample, xyz, offset, new_xyz=None, new_offset=None):
    inputs = {"xyz": xyz, "offset": offset, "new_xyz": new_xyz, "new_offset": new_offset}
    model = single_node_model("knnquery", inputs, ["idx", "dist"], nsample=nsample)
    return session(model).run(None, feeds(inputs))


def make_case(rng, sizes, query_sizes, duplicates=False):
    xyz, offset = random_clouds(rng, sizes, duplicates=duplicates)
    if query_sizes is None:
        return xyz, offset, None, None
    new_xyz, new_offset = random_clouds(rng, query_sizes)
    return xyz, offset, new_xyz, new_offset


@pytest.mark.parametrize("run", [run_torch, run_ort], ids=["torch", "ort"])
@pytest.mark.parametrize("duplicates", [False, True], ids=["distinct", "duplicates"])
@pytest.mark.parametrize("sizes,query_sizes,nsample", CASES, ids=str)
def test_matches_brute_force(rng, run, duplicates, sizes, query_sizes, nsample):
    xyz, offset, new_xyz, new_offset = make_case(rng, sizes, query_sizes, duplicates)
    idx, dist = run(nsample, xyz, offset, new_xyz, new_offset)
    ref_idx, ref_dist = knn_reference(nsample, xyz, offset, new_xyz, new_offset)
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


def test_opcheck(rng):
    xyz, offset = random_clouds(rng, [20, 13])
    q, qo = random_clouds(rng, [4, 6])
    for args in [(5, xyz, offset), (5, xyz, offset, q, qo)]:
        torch.library.opcheck(torch.ops.customops.knn_query.default,
                              tuple(torch.from_numpy(a) if isinstance(a, np.ndarray) else a
                                    for a in args))


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
                   verbose=False, **kwargs)
    (node,) = model.graph.node
    assert (node.domain, node.op_type, len(node.input), len(node.output)) == (
        "custom", "knnquery", len(names), 2)
    assert [(a.name, a.i) for a in node.attribute] == [("nsample", 8)]
