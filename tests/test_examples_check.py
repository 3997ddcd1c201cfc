"""Every op of every ORT custom-op library the course ships as an example passes
customops.check (issue 51), built by the command its header comment gives.

Not here: examples/ship_op's library (tests/test_ship_op.py runs the check
on it); examples/cmake_ort_library, a CMakeLists.txt (tests/test_cmake_ort_library.py
builds embed_classic.cc with it); examples/cpp, a host program whose built-in
ops are csrc/ort's; port_seed/foo_op_old.cc, which no longer compiles (notebook
07); and kernel_config/relu_override.cc, an op of the ONNX domain, which the
check does not take ("the model has no node of a custom domain").

`runtimes` and `library` look at the library, not the op: they run on each
library's first op only, and in the installed onnxruntime alone, to keep the
test short (about 67 s for the seven ops, builds included, on 2 busy cores;
tests/test_from_scratch.py runs three of the libraries in onnxruntime 1.24.4)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers import build_example, single_node_model

from customops import check

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
LITE = EXAMPLES / "my_first_op" / "embed_lite.cc"


def embed(rng, rows):
    return {"ids": rng.integers(0, 5, rows), "table": rng.standard_normal((5, 3), dtype=np.float32)}


def affine(rng, rows):
    return {**embed(rng, rows), "scale": rng.standard_normal(3, dtype=np.float32),
            "bias": rng.standard_normal(3, dtype=np.float32)}


def affine_reference(ids, table, scale=None, bias=None):
    return table[ids] * (1 if scale is None else scale) + (0 if bias is None else bias)


def rows_of_3(*names):
    return lambda rng, rows: {name: rng.standard_normal((rows, 3), dtype=np.float32) for name in names}


# (source, op, domain, the domain's version, attributes, samples(rng, rows), reference)
OPS = [
    (LITE, "embed", "my_ops", 1, {}, embed, lambda ids, table: table[ids]),
    (LITE, "embed_scaled", "my_ops", 1, {"scale": 0.5}, embed,
     lambda ids, table, scale=1.0: table[ids] * np.float32(scale)),
    (LITE, "embed_affine", "my_ops", 1, {}, affine, affine_reference),
    (EXAMPLES / "my_first_op" / "embed_classic.cc", "embed", "my_ops", 2, {}, affine, affine_reference),
    (EXAMPLES / "my_first_op" / "embed_versions.cc", "which", "my_ops", 1, {}, rows_of_3("x"),
     lambda x: np.ones(1, np.float32)),
    (EXAMPLES / "port_seed" / "foo_op.cc", "Foo", "custom", 1, {}, rows_of_3("X", "Y"), lambda X, Y: X + Y),
    (EXAMPLES / "kernel_config" / "scale_op.cc", "scale", "my_ops", 1, {}, rows_of_3("x"), lambda x: x),
]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Each library built once, when its first op needs it."""
    folder, libraries = tmp_path_factory.mktemp("examples"), {}

    def library(source: Path) -> Path:
        if source not in libraries:
            libraries[source] = folder / f"lib{source.stem}.so"
            build_example(source, libraries[source])
        return libraries[source]
    return library


@pytest.mark.parametrize("source, op, domain, version, attributes, samples, reference", OPS,
                         ids=[f"{source.stem}-{op}" for source, op, *_ in OPS])
def test_passes_customops_check(source, op, domain, version, attributes, samples, reference, built, rng,
                                tmp_path):
    library = built(source)
    arrays = [samples(rng, rows) for rows in (4, 300)]
    model = single_node_model(op, arrays[0], ["out"], domain=domain, **attributes)
    model.opset_import[1].version = version  # the domain's version the example registers
    first = next(o for o in OPS if o[0] == source)[1] == op
    checks = [c for c in check.CHECKS if first or c not in ("runtimes", "library")]
    records = check.run(model, [library], arrays, reference=reference, checks=checks, runtimes_python=[],
                        failures=tmp_path / "failures")
    assert [r["name"] for r in records] == checks
    failed = [r for r in records if r["ok"] is not True]  # None: a check that did not run
    assert not failed, failed
