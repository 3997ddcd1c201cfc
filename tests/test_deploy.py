"""Deployment without torch: exported models run with onnxruntime, numpy and
customops.ort alone, in a process where ``import torch`` fails.

The parent process (this one, with torch) exports one model per op with each
exporter, as tests/exporting.py does, saves them
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
from exporting import export
from optable import BY_ONNX_NAME, DOMAIN, OPS, basic_samples

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK_MODELS = ROOT / "notebooks" / "models"


class Call(torch.nn.Module):
    """One op of the table through its Python API, the tensors the sample
    gives as the model's inputs and its attributes as constants."""

    def __init__(self, op, sample):
        super().__init__()
        self.op, self.attrs = op, sample.attrs
        self.names = [k for k, v in sample.inputs.items() if v is not None]

    def forward(self, *values):
        tensors = {name: None for name in self.op.input_names}
        tensors.update(zip(self.names, values))
        return self.op.python(tensors, self.attrs)


class Deform(torch.nn.Module):
    """deform_conv2d with its weight and bias as parameters (initializers)."""

    def __init__(self, use_mask=True):
        super().__init__()
        generator = torch.Generator().manual_seed(0)
        self.weight = torch.nn.Parameter(torch.randn(6, 2, 3, 3, generator=generator))
        self.bias = torch.nn.Parameter(torch.randn(6, generator=generator))
        self.use_mask = use_mask

    def forward(self, x, offset, mask=None):
        return customops.deform_conv2d(x, offset, self.weight, self.bias, padding=(1, 1),
                                       mask=mask if self.use_mask else None)


def cases():
    """Every basic sample of every op, and deform_conv2d with parameters."""
    models = {f"{op.name}-{s.id}": (Call(op, s), {k: v for k, v in s.inputs.items()
                                                   if v is not None})
              for op in OPS.values() for s in basic_samples(op)}
    rng = np.random.default_rng(11)
    x = rng.standard_normal((1, 4, 7, 7), dtype=np.float32)
    deform_offset = 2 * rng.standard_normal((1, 18, 7, 7), dtype=np.float32)
    mask = rng.random((1, 9, 7, 7), dtype=np.float32)
    models["deform_conv2d-parameters"] = (Deform(), {"x": x, "offset": deform_offset,
                                                     "mask": mask})
    # the node that skips a middle optional input: bias given, mask absent
    models["deform_conv2d-parameters-nomask"] = (Deform(use_mask=False),
                                                 {"x": x, "offset": deform_offset})
    return models, torch.from_numpy


def uses_custom_domain(model: onnx.ModelProto) -> bool:
    nodes = list(model.graph.node) + [n for f in model.functions for n in f.node]
    return any(n.domain == DOMAIN for n in nodes)


def kind(model: onnx.ModelProto) -> tuple[str, dict]:
    """The op whose reference the torch-free child can check the outputs
    against (a single node of ours whose reference needs no torch), and the
    node's attributes; ("other", {}) otherwise."""
    nodes = list(model.graph.node)
    if len(nodes) == 1 and nodes[0].domain == DOMAIN and nodes[0].op_type in BY_ONNX_NAME:
        op = BY_ONNX_NAME[nodes[0].op_type]
        if op.torch_free_reference:
            return op.name, {a.name: onnx.helper.get_attribute_value(a)
                             for a in nodes[0].attribute}
    return "other", {}


CHILD = textwrap.dedent("""
    import sys
    sys.modules["torch"] = None          # any `import torch` now raises ImportError
    import json
    import numpy as np
    import onnxruntime
    from customops.ort import session
    import customops                     # the package root stays torch-free too
    sys.path.insert(0, sys.argv[2])      # tests/: helpers, optable (numpy and onnx only)
    from optable import OPS

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
        if item["kind"] != "other":
            op = OPS[item["kind"]]
            inputs = {name: feeds.get(name) for name in op.input_names}
            for g, e in zip(got, op.reference(inputs, item["attrs"])):
                np.testing.assert_allclose(g, e, rtol=max(op.rtol, 1e-6), atol=op.atol)
        ran.append(item["model"])

    loaded = [m for m, v in sys.modules.items() if v is not None and m.split(".")[0] == "torch"]
    assert not loaded, loaded
    print(json.dumps({"ran": ran}))
""")


# Models the notebooks save to show a failure, and what the doctor finds in
# them (tests/test_doctor.py checks that): every other one must run.
BROKEN_ON_PURPOSE = {
    "04_grid_seed.onnx": "unresolved-op",      # the seed's grid symbolic: no kernel has its node
    "05_knn_seed.onnx": "attribute-as-input",  # the seed's KNNQuery: nsample as a tensor input
}


def notebook_models():
    """notebooks/models/*.onnx that use the custom domain, with their kind
    (those in BROKEN_ON_PURPOSE left out)."""
    found = []
    for path in sorted(NOTEBOOK_MODELS.glob("*.onnx")):
        if path.name in BROKEN_ON_PURPOSE:
            continue
        model = onnx.load(path, load_external_data=False)
        if uses_custom_domain(model):
            op, attrs = kind(model)
            found.append({"model": str(path), "kind": op, "attrs": attrs})
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
            kwargs = {"input_names": list(inputs)}
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
