"""What is benchmarked, as data: groups of cases, their contenders, the
ratios to report and the targets to meet.  harness.run_case times them."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np
import torch
import torchvision
from scipy.spatial import cKDTree

import customops.ops  # noqa: F401  (registers torch.ops.customops.*)
import models
from harness import Case, Contender

K = 16


@dataclass
class Ratio:
    """numerator's median time / denominator's; ``label`` names it."""

    numerator: str
    denominator: str
    label: str = ""

    def __post_init__(self):
        self.label = self.label or f"{self.numerator} / {self.denominator}"


@dataclass
class Group:
    name: str
    title: str
    check_label: str  # what the "check" column means
    cases: list[Case]
    ratios: list[Ratio] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class Target:
    """A PASS/FAIL line: the ratio ``ratio`` of case ``case`` must be
    ``<= limit`` (``at_most``) or ``>= limit``."""

    text: str
    case: str
    ratio: str
    limit: float
    at_most: bool = True

    def verdict(self, value):
        if value is None:
            return "N/A"
        ok = value <= self.limit if self.at_most else value >= self.limit
        return "PASS" if ok else "FAIL"


def _rng(*seed):
    return np.random.default_rng(list(seed))


def _fixed(make):
    """Inputs that stay the same in every repetition (made once)."""
    made = functools.cache(make)
    return lambda rep: made()


def _fresh(make):
    """Fresh inputs in every repetition, the same for every contender."""
    return functools.lru_cache(maxsize=None)(make)


def _thousands(n: int) -> str:
    return f"{n:,}"


# --- KNN ---------------------------------------------------------------------


def uniform_points(rng, count):
    return rng.random((count, 3), dtype=np.float32)


def clustered_points(rng, count, centers, sigma=0.02):
    """Gaussian blobs around ``centers``: dense clusters and empty space."""
    labels = rng.integers(0, len(centers), count)
    points = centers[labels] + rng.normal(0.0, sigma, (count, 3))
    return points.astype(np.float32)


def packed(parts):
    """Clouds stored one after another, with cumulative end offsets."""
    offsets = np.cumsum([len(p) for p in parts]).astype(np.int32)
    return np.ascontiguousarray(np.concatenate(parts), np.float32), offsets


def knn_inputs(kind: str, n: int, m: int, clouds: int, seed: int):
    """inputs(rep): ``clouds`` clouds of n/clouds points and m/clouds
    queries each, fresh for every repetition."""

    def make(rep):
        rng = _rng(seed, rep)
        if kind == "clustered":
            centers = rng.random((32, 3))
            draw = lambda count: clustered_points(rng, count, centers)  # noqa: E731
        else:
            draw = lambda count: uniform_points(rng, count)  # noqa: E731
        xyz, offset = packed([draw(n // clouds) for _ in range(clouds)])
        new_xyz, new_offset = packed([draw(m // clouds) for _ in range(clouds)])
        return {"xyz": xyz, "offset": offset, "new_xyz": new_xyz, "new_offset": new_offset}

    return _fresh(make)


def cloud_slices(inputs):
    """(points, queries, first row) of each cloud."""
    start, qstart = 0, 0
    for end, qend in zip(inputs["offset"], inputs["new_offset"]):
        yield inputs["xyz"][start:end], inputs["new_xyz"][qstart:qend], start
        start, qstart = end, qend


def ckdtree_knn(threads):
    def call(inputs):
        dists, rows = [], []
        for points, queries, start in cloud_slices(inputs):
            d, i = cKDTree(points).query(queries, k=K, workers=threads)
            dists.append(d)
            rows.append(i + start)
        return np.concatenate(dists), np.concatenate(rows)

    return call


def canonical_idx(outputs):
    """cKDTree's rows in the contract's order (distance, then smaller index)."""
    dist, idx = outputs
    order = np.lexsort((idx, dist), axis=-1)
    return np.take_along_axis(idx, order, axis=-1).astype(np.int32)


def torch_knn(inputs):
    tensors = {k: torch.from_numpy(v) for k, v in inputs.items()}
    return torch.ops.customops.knn_query(K, tensors["xyz"], tensors["offset"],
                                         tensors["new_xyz"], tensors["new_offset"])


def cdist_topk(inputs, chunk_elements=1 << 26):
    """Brute force: all distances of a block of queries, then topk; blocks
    keep the distance matrix at 256 MB."""
    found = []
    for points, queries, start in cloud_slices(inputs):
        p, q = torch.from_numpy(points), torch.from_numpy(queries)
        step = max(1, chunk_elements // max(len(points), 1))
        for i in range(0, len(q), step):
            d = torch.cdist(q[i:i + step], p)
            found.append(d.topk(K, dim=1, largest=False).indices + start)
    return torch.cat(found)


def knn_model(example):
    return models.single_node("knnquery", example, ["idx", "dist"], nsample=K)


def knn_ort(name, example, threads):
    return Contender(name, lambda: models.runner(knn_model(example), threads),
                     result=lambda out: out[0])


def check_idx(idx, reference):
    differ = int(np.any(idx != reference, axis=1).sum()) if idx.shape == reference.shape else -1
    return None if differ == 0 else f"{differ} of {len(reference)} rows differ"


KNN_SIZES = [(4096, 1024), (16384, 4096), (65536, 16384), (262144, 65536)]
KNN_TARGET_SIZES = [(65536, 16384), (262144, 65536)]


def knn_label(n, m, kind="uniform", clouds=1):
    label = f"n={_thousands(n)} m={_thousands(m)}"
    if clouds > 1:
        label += f", {clouds} clouds"
    return label if kind == "uniform" else f"{label}, {kind}"


def knn_case(n, m, threads, cdist_limit, kind="uniform", clouds=1):
    inputs = knn_inputs(kind, n, m, clouds, seed=n + m + clouds + len(kind))
    example = inputs(0)
    pairs = n // clouds * (m // clouds)
    if kind != "uniform":
        cdist_skip = "skipped (brute force costs the same as on uniform points)"
    elif pairs > cdist_limit:
        cdist_skip = f"skipped (n*m = {pairs:.2g} > limit {cdist_limit:.2g}; minutes)"
    else:
        cdist_skip = None
    return Case(
        "knn", knn_label(n, m, kind, clouds), inputs,
        [
            knn_ort("ours (ORT)", example, threads),
            Contender("ours (torch op)", lambda: torch_knn, result=lambda out: out[0].numpy()),
            Contender("cKDTree", lambda: ckdtree_knn(threads), result=canonical_idx),
            Contender("cdist+topk", lambda: cdist_topk, checked=False,
                      skip=cdist_skip),
        ],
        reference="cKDTree", check=check_idx,
        params={"n": n, "m": m, "k": K, "clouds": clouds, "points": kind},
    )


def knn_group(threads, cdist_limit):
    cases = [knn_case(n, m, threads, cdist_limit) for n, m in KNN_SIZES]
    cases.append(knn_case(65536, 16384, threads, cdist_limit, clouds=8))
    cases.append(knn_case(65536, 16384, threads, cdist_limit, kind="clustered"))
    return Group(
        "knn", f"KNN, k = {K}, float32 points in [0, 1)^3", "idx identical to cKDTree", cases,
        [Ratio("ours (ORT)", "cKDTree"), Ratio("ours (torch op)", "cKDTree"),
         Ratio("cdist+topk", "ours (ORT)")],
        notes=[
            "Each repetition draws a fresh cloud (the same one for every contender), "
            "outside the timed region; our kernels build their index inside the call, "
            "cKDTree's time is build + query(k, workers=threads).",
            "Batch: 8 clouds packed with offsets (8,192 points, 2,048 queries each); "
            "cKDTree and cdist loop over the clouds.  Clustered: 32 Gaussian blobs, "
            "sigma 0.02.",
            "cdist+topk computes float32 distances (matrix-product form), so its "
            "tie order is not checked; it runs in blocks of 2^26 distances.",
        ],
    )


# --- deform_conv2d -------------------------------------------------------------


def deform_inputs(size, with_mask, channels=64):
    def make():
        rng = _rng(size, with_mask)
        x = rng.standard_normal((1, channels, size, size), dtype=np.float32)
        weight = (rng.standard_normal((channels, channels, 3, 3), dtype=np.float32) * 0.05)
        offset = rng.normal(0.0, 2.0, (1, 2 * 9, size, size)).astype(np.float32)
        mask = 1 / (1 + np.exp(-rng.standard_normal((1, 9, size, size), dtype=np.float32)))
        bias = rng.standard_normal(channels, dtype=np.float32)
        return {"x": x, "weight": weight, "offset": offset,
                "mask": mask.astype(np.float32) if with_mask else None, "bias": bias}

    return _fixed(make)


def deform_ours_model(example):
    names = ["x", "weight", "offset", "mask", "bias"]
    return models.single_node(
        "deform_conv2d", {n: example[n] for n in names}, ["y"],
        stride=[1, 1], padding=[1, 1], dilation=[1, 1], groups=1, offset_groups=1)


def deform_builtin_model(example):
    names = ["x", "weight", "offset", "bias", "mask"]  # ONNX DeformConv's order
    return models.single_node(
        "DeformConv", {n: example[n] for n in names}, ["y"], domain="",
        kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1], dilations=[1, 1],
        group=1, offset_group=1)


def _tensors(inputs):
    return {k: None if v is None else torch.from_numpy(v) for k, v in inputs.items()}


def torchvision_deform(inputs):
    t = _tensors(inputs)
    return torchvision.ops.deform_conv2d(t["x"], t["offset"], t["weight"], t["bias"],
                                         padding=(1, 1), mask=t["mask"])


def torch_op_deform(inputs):
    t = _tensors(inputs)
    return torch.ops.customops.deform_conv2d(t["x"], t["weight"], t["offset"], t["mask"],
                                             t["bias"], [1, 1], [1, 1], [1, 1], 1, 1)


def allclose(rtol, atol):
    def check(out, reference):
        if out.shape != reference.shape:
            return f"shape {out.shape} != {reference.shape}"
        if np.allclose(out, reference, rtol=rtol, atol=atol):
            return None
        return f"max |diff| {np.abs(out - reference).max():.3g}"

    return check


def deform_ort(name, example, threads, builtin=False):
    model = (deform_builtin_model if builtin else deform_ours_model)(example)
    return Contender(name, lambda: models.runner(model, threads, custom=not builtin),
                     result=lambda out: out[0])


def deform_label(size, with_mask):
    return f"H=W={size}, {'mask' if with_mask else 'no mask'}"


def deform_case(size, with_mask, threads):
    inputs = deform_inputs(size, with_mask)
    example = inputs(0)
    as_numpy = lambda out: out.numpy()  # noqa: E731
    return Case(
        "deform_conv2d", deform_label(size, with_mask), inputs,
        [
            deform_ort("ours (ORT)", example, threads),
            deform_ort("ORT DeformConv", example, threads, builtin=True),
            Contender("torchvision", lambda: torchvision_deform, result=as_numpy),
            Contender("ours (torch op)", lambda: torch_op_deform, result=as_numpy),
        ],
        reference="torchvision", check=allclose(1e-4, 1e-4),
        params={"N": 1, "C": 64, "O": 64, "kernel": 3, "padding": 1, "H": size, "W": size,
                "mask": with_mask, "bias": True},
    )


def deform_group(threads):
    cases = [deform_case(size, with_mask, threads)
             for size in (32, 64, 128) for with_mask in (False, True)]
    return Group(
        "deform_conv2d", "deform_conv2d, N=1, C=O=64, 3x3, padding 1, with bias",
        "allclose to torchvision (rtol = atol = 1e-4)", cases,
        [Ratio("ours (ORT)", "ORT DeformConv"), Ratio("torchvision", "ours (ORT)")],
        notes=["Without mask our node skips its middle optional input (mask = \"\") and "
               "ORT's DeformConv gets no mask input."],
    )


# --- my_add --------------------------------------------------------------------


def add_inputs(count):
    def make():
        rng = _rng(count)
        return {"a": rng.random(count, dtype=np.float32), "b": rng.random(count, dtype=np.float32)}

    return _fixed(make)


def my_add_ort(name, example, threads):
    model = models.single_node("my_add", {"a": example["a"], "b": example["b"]}, ["c"])
    return Contender(name, lambda: models.runner(model, threads), result=lambda out: out[0])


def mul_add_ort(name, example, threads):
    model = models.mul_add_graph(example["a"], example["b"])
    return Contender(name, lambda: models.runner(model, threads, custom=False),
                     result=lambda out: out[0])


def torch_op_add(inputs):
    return torch.ops.customops.my_add(torch.from_numpy(inputs["a"]), torch.from_numpy(inputs["b"]))


def my_add_case(count, label, threads):
    inputs = add_inputs(count)
    example = inputs(0)
    return Case(
        "my_add", label, inputs,
        [
            my_add_ort("ours (ORT)", example, threads),
            mul_add_ort("Mul+Add graph (ORT)", example, threads),
            Contender("ours (torch op)", lambda: torch_op_add, result=lambda out: out.numpy()),
        ],
        reference="Mul+Add graph (ORT)", check=allclose(1e-6, 1e-6),
        params={"elements": count},
    )


MY_ADD_LABEL = "2^24 elements"


def my_add_group(threads):
    return Group(
        "my_add", "my_add (2a + b), float32", "allclose to the Mul+Add graph",
        [my_add_case(1 << 24, MY_ADD_LABEL, threads),
         my_add_case(1, "1 element (per-call overhead)", threads)],
        [Ratio("ours (ORT)", "Mul+Add graph (ORT)")],
        notes=["The Mul+Add graph is Constant(2.0) -> Mul -> Add with standard ops. "
               "ORT's run() returns its output buffers without a copy; the 1-element "
               "row is the fixed cost of one session.run call."],
    )


# --- threads scaling -------------------------------------------------------------


def scaling_case(label, inputs, contender, check):
    example = inputs(0)
    return Case("threads", label, inputs,
                [contender("ORT, 1 thread", example, 1), contender("ORT, 2 threads", example, 2)],
                reference="ORT, 1 thread", check=check)


def threads_group():
    return Group(
        "threads", "Thread scaling of our ORT kernels (intra_op_num_threads 1 vs 2)",
        "2 threads == 1 thread",
        [
            scaling_case(f"KNN {knn_label(65536, 16384)}",
                         knn_inputs("uniform", 65536, 16384, 1, seed=65536 + 16384 + 1 + 7),
                         knn_ort, check_idx),
            scaling_case(f"deform_conv2d {deform_label(128, True)}", deform_inputs(128, True),
                         deform_ort, allclose(1e-5, 1e-5)),
            scaling_case(f"my_add {MY_ADD_LABEL}", add_inputs(1 << 24), my_add_ort,
                         allclose(0, 0)),
        ],
        [Ratio("ORT, 1 thread", "ORT, 2 threads", "speed-up 1 -> 2 threads")],
    )


# --- ORT's own costs ---------------------------------------------------------------


def session_contender(name, model, threads, custom):
    # The session is dropped after the timed call (result discards it).
    return Contender(name, lambda: lambda inputs: models.session(model, threads, custom),
                     checked=False, result=lambda session: None)


def overhead_group(threads):
    """What a session costs to create: parsing, registering our library
    (custom only), graph optimisation, thread pool start-up."""
    knn_example = knn_inputs("uniform", 4096, 1024, 1, seed=0)(0)
    add_example = add_inputs(1)(0)
    case = Case(
        "overhead", "InferenceSession(...)", lambda rep: None,
        [session_contender("knnquery model (ours)", knn_model(knn_example), threads, True),
         session_contender("my_add model (ours)",
                           models.single_node("my_add", add_example, ["c"]), threads, True),
         session_contender("Mul+Add graph", models.mul_add_graph(add_example["a"],
                                                                  add_example["b"]),
                           threads, False)],
        reference="knnquery model (ours)", check=lambda out, reference: None)
    return Group("overhead", "ORT session creation", "check", [case],
                 notes=["Session creation is paid once per model; the per-call cost of "
                        "session.run is the my_add table's 1-element row."])


# --- everything ----------------------------------------------------------------------


GROUPS = ("knn", "deform_conv2d", "my_add", "threads", "overhead")


def groups(names, threads, cdist_limit):
    make = {"knn": lambda: knn_group(threads, cdist_limit),
            "deform_conv2d": lambda: deform_group(threads),
            "my_add": lambda: my_add_group(threads),
            "threads": threads_group,
            "overhead": lambda: overhead_group(threads)}
    return [make[name]() for name in names]


def targets():
    knn_ratio = "ours (ORT) / cKDTree"
    return [
        *[Target(f"KNN ORT kernel <= 1.0x cKDTree build+query at ({_thousands(n)}, {_thousands(m)})",
                 f"knn/{knn_label(n, m)}", knn_ratio, 1.0) for n, m in KNN_TARGET_SIZES],
        Target("KNN ORT kernel >= 50x faster than cdist+topk at (65,536, 16,384)",
               f"knn/{knn_label(65536, 16384)}", "cdist+topk / ours (ORT)", 50.0, at_most=False),
        *[Target(f"deform_conv2d ORT kernel <= 1.5x ORT DeformConv at H=W=128, "
                 f"{'mask' if mask else 'no mask'}",
                 f"deform_conv2d/{deform_label(128, mask)}", "ours (ORT) / ORT DeformConv", 1.5)
          for mask in (False, True)],
        *[Target(f"deform_conv2d ORT kernel >= 5x faster than torchvision at H=W=128, "
                 f"{'mask' if mask else 'no mask'}",
                 f"deform_conv2d/{deform_label(128, mask)}", "torchvision / ours (ORT)", 5.0,
                 at_most=False)
          for mask in (False, True)],
        Target("my_add ORT kernel <= 1.1x the Mul+Add graph (2^24 elements)",
               f"my_add/{MY_ADD_LABEL}", "ours (ORT) / Mul+Add graph (ORT)", 1.1),
    ]
