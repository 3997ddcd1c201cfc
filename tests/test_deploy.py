"""Deployment without torch: exported models run with onnxruntime, numpy and
customops.ort alone, in a process where ``import torch`` fails.

The parent process (this one, with torch) exports one model per op with each
exporter, the way the notebooks do (``customops.verify.export``), saves them
with their inputs and the outputs torch computed, and a child process that
cannot import torch (``sys.modules["torch"] = None`` before anything else)
runs them and compares.  The child also runs every model the notebooks
saved in notebooks/models/ that uses the custom domain, when those exist
(they are git-ignored and appear once the notebooks ran), with valid inputs
built from each model's input names and types.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

import customops
from customops.verify import export
from helpers import random_clouds

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK_MODELS = ROOT / "notebooks" / "models"
DOMAIN = "custom"


class MyAdd(torch.nn.Module):
    def forward(self, a, b):
        return customops.my_add(a, b)


class Knn(torch.nn.Module):
    def forward(self, xyz, offset, new_xyz, new_offset):
        return customops.knn_query(8, xyz, offset, new_xyz, new_offset)


class KnnSelf(torch.nn.Module):
    def forward(self, xyz, offset):
        return customops.knn_query(5, xyz, offset)


class Deform(torch.nn.Module):
    """deform_conv2d with its weight and bias as parameters (initializers)."""

    def __init__(self, use_mask=True):
        super().__init__()
        generator = torch.Generator().manual_seed(0)
        self.weight = torch.nn.Parameter(torch.randn(6, 2, 3, 3, generator=generator))
        self.bias = torch.nn.Parameter(torch.randn(6, generator=generator))
        self.use_mask = use_mask

    def forward(self, x, offset, mask):
        return customops.deform_conv2d(x, offset, self.weight, self.bias, padding=(1, 1),
                                       mask=mask if self.use_mask else None)


class DeformNoMask(Deform):
    """The node that skips a middle optional input: bias given, mask absent."""

    def __init__(self):
        super().__init__(use_mask=False)

    def forward(self, x, offset):
        return customops.deform_conv2d(x, offset, self.weight, self.bias, padding=(1, 1))


def cases():
    rng = np.random.default_rng(11)
    t = lambda a: torch.from_numpy(a)  # noqa: E731
    xyz, offset = random_clouds(rng, [40, 25])
    new_xyz, new_offset = random_clouds(rng, [10, 7])
    x = rng.standard_normal((1, 4, 7, 7), dtype=np.float32)
    deform_offset = 2 * rng.standard_normal((1, 18, 7, 7), dtype=np.float32)
    mask = rng.random((1, 9, 7, 7), dtype=np.float32)
    a, b = (rng.standard_normal((3, 4), dtype=np.float32) for _ in range(2))
    return {
        "my_add": (MyAdd(), {"a": a, "b": b}),
        "knn_query": (Knn(), {"xyz": xyz, "offset": offset, "new_xyz": new_xyz,
                              "new_offset": new_offset}),
        "knn_query_self": (KnnSelf(), {"xyz": xyz, "offset": offset}),
        "deform_conv2d": (Deform(), {"x": x, "offset": deform_offset, "mask": mask}),
        "deform_conv2d_nomask": (DeformNoMask(), {"x": x, "offset": deform_offset}),
    }, t


def uses_custom_domain(model: onnx.ModelProto) -> bool:
    nodes = list(model.graph.node) + [n for f in model.functions for n in f.node]
    return any(n.domain == DOMAIN for n in nodes)


def kind(model: onnx.ModelProto) -> str:
    """What the child can check the outputs against."""
    ops = [(n.domain, n.op_type) for n in model.graph.node]
    if ops == [(DOMAIN, "my_add")]:
        return "my_add"
    if ops == [(DOMAIN, "knnquery")]:
        return "knn_query"
    return "other"


CHILD = textwrap.dedent("""
    import sys
    sys.modules["torch"] = None          # any `import torch` now raises ImportError
    import json
    import numpy as np
    import onnxruntime
    from customops.ort import session
    import customops                     # the package root stays torch-free too
    sys.path.insert(0, sys.argv[2])      # tests/: helpers (numpy and onnx only)
    from helpers import knn_reference

    plan = json.loads(open(sys.argv[1]).read())
    ran = []

    # 1. Models exported by the parent: compare with torch's outputs.
    for item in plan["exported"]:
        data = np.load(item["data"])
        sess = session(item["model"])
        feeds = {i.name: data["in_" + i.name] for i in sess.get_inputs()}
        got = sess.run(None, feeds)
        expected = [data[f"out_{k}"] for k in range(len(got))]
        for g, e in zip(got, expected):
            assert g.shape == e.shape and g.dtype == e.dtype, (item["model"], g.shape, e.shape)
            if np.issubdtype(e.dtype, np.integer):
                np.testing.assert_array_equal(g, e, err_msg=item["model"])
            else:
                np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-4, err_msg=item["model"])
        ran.append(item["model"])

    # 2. The notebooks' models: valid inputs from the inputs' names and types.
    SIZES = {"n": 64, "m": 24, "b": 3}
    POINTS = {"offset": "xyz", "new_offset": "new_xyz"}
    TYPES = {"tensor(float)": np.float32, "tensor(int32)": np.int32,
             "tensor(int64)": np.int64, "tensor(double)": np.float64}

    def make_inputs(sess, rng):
        meta = {i.name: i for i in sess.get_inputs()}
        dims = {}
        def shape_of(i):
            out = []
            for d in i.shape:
                if isinstance(d, int):
                    out.append(d)
                else:
                    out.append(dims.setdefault(d, SIZES.get(d, 3)))
            return tuple(out)
        feeds = {}
        for name, i in meta.items():      # points and plain tensors first
            if i.type == "tensor(float)":
                shape = shape_of(i)
                if name in POINTS.values():
                    feeds[name] = rng.random(shape, dtype=np.float32)
                else:
                    feeds[name] = rng.standard_normal(shape, dtype=np.float32)
        for name, i in meta.items():      # then offsets: cumulative sizes ending at n
            if i.type == "tensor(float)":
                continue
            if name not in POINTS or POINTS[name] not in feeds or i.type != "tensor(int32)":
                raise SystemExit(f"{sess._model_path}: cannot build a valid value for "
                                 f"input {name} ({i.type}{i.shape}): teach tests/test_deploy.py")
            (b,) = shape_of(i)
            total = len(feeds[POINTS[name]])
            cuts = np.sort(rng.integers(0, total + 1, b - 1))
            feeds[name] = np.append(cuts, total).astype(np.int32)
        return feeds

    rng = np.random.default_rng(0)
    for item in plan["notebooks"]:
        sess = session(item["model"])
        feeds = make_inputs(sess, rng)
        got = sess.run(None, feeds)
        for out, value in zip(sess.get_outputs(), got):
            fixed = [d if isinstance(d, int) else None for d in out.shape]
            assert all(f is None or f == s for f, s in zip(fixed, value.shape)), \\
                (item["model"], out.name, out.shape, value.shape)
            if value.dtype.kind == "f":
                assert not np.isnan(value).any(), (item["model"], out.name)
        if item["kind"] == "my_add":
            np.testing.assert_allclose(got[0], 2 * feeds["a"] + feeds["b"], rtol=1e-6)
        elif item["kind"] == "knn_query":
            idx, dist = got
            ref_idx, ref_dist = knn_reference(idx.shape[1], feeds["xyz"], feeds["offset"],
                                              feeds.get("new_xyz"), feeds.get("new_offset"))
            np.testing.assert_array_equal(idx, ref_idx)
            np.testing.assert_allclose(dist, ref_dist, rtol=1e-6)
        ran.append(item["model"])

    loaded = [m for m, v in sys.modules.items() if v is not None and m.split(".")[0] == "torch"]
    assert not loaded, loaded
    print(json.dumps({"ran": ran}))
""")


def notebook_models():
    """notebooks/models/*.onnx that use the custom domain, with their kind."""
    found = []
    for path in sorted(NOTEBOOK_MODELS.glob("*.onnx")):
        model = onnx.load(path, load_external_data=False)
        if uses_custom_domain(model):
            found.append({"model": str(path), "kind": kind(model)})
    return found


def run_torch_free(plan: dict, tmp_path: Path):
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(plan))
    env = dict(os.environ)
    package_root = str(Path(customops.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(plan_file), str(Path(__file__).parent)],
        capture_output=True, text=True, env=env, timeout=600, check=False)
    assert done.returncode == 0, f"exit status {done.returncode}\n{done.stdout}\n{done.stderr}"
    return json.loads(done.stdout.strip().splitlines()[-1])["ran"]


def export_cases(folder: Path) -> list[dict]:
    """Every case exported with both exporters into ``folder``, saved with
    inputs and torch's outputs: [{"model": path, "data": path}, ...]."""
    models, t = cases()
    items = []
    for name, (module, inputs) in models.items():
        args = tuple(t(a) for a in inputs.values())
        with torch.no_grad():
            outputs = module(*args)
        outputs = outputs if isinstance(outputs, tuple) else (outputs,)
        for dynamo in (False, True):
            exporter = "dynamo" if dynamo else "torchscript"
            kwargs = {} if dynamo else {"input_names": list(inputs)}
            model = export(module, args, dynamo=dynamo, **kwargs)
            assert uses_custom_domain(model), (name, exporter)
            path = folder / f"{name}_{exporter}.onnx"
            onnx.save(model, path)
            data = folder / f"{name}_{exporter}.npz"
            np.savez(data, **{f"in_{k}": v for k, v in inputs.items()},
                     **{f"out_{i}": o.numpy() for i, o in enumerate(outputs)})
            items.append({"model": str(path), "data": str(data)})
    return items


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    return export_cases(tmp_path_factory.mktemp("deploy"))


def test_exported_models_run_without_torch(exported, tmp_path, capsys):
    notebooks = notebook_models()
    ran = run_torch_free({"exported": exported, "notebooks": notebooks}, tmp_path)
    assert len(ran) == len(exported) + len(notebooks)
    with capsys.disabled():
        print(f"\ntorch-free: ran {len(exported)} freshly exported models "
              f"({len(exported) // 2} ops/variants x 2 exporters) and "
              f"{len(notebooks)} notebook models from {NOTEBOOK_MODELS.relative_to(ROOT)}"
              + ("" if notebooks else " (none there: the notebooks have not run yet)"))
        for item in notebooks:
            print(f"  {Path(item['model']).name} ({item['kind']})")
