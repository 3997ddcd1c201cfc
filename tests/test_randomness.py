"""The suite's randomness is replayable: every test draws from its own seeded
stream (the ``rng`` fixture, or a generator seeded from it), never from a
global generator, whose state depends on which tests ran before.

Two checks, because neither sees everything: conftest.py's autouse fixture
fails a test that changes a global generator's state while it runs (it sees
hidden draws, such as an nn.Module's default initialisation), and the source
scan below finds the draws a test file makes at import, outside any test.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

TESTS = Path(__file__).resolve().parent

# torch functions that draw from torch's global generator unless given one
TORCH_DRAWS = {"rand", "randn", "randint", "randperm", "rand_like", "randn_like", "randint_like",
               "normal", "bernoulli", "multinomial", "poisson"}
# numpy.random names that make a seeded generator instead of drawing
NUMPY_SEEDED = {"default_rng", "Generator", "PCG64", "SeedSequence"}


def import_time_draws(source: str) -> list[str]:
    """'line: call' for each draw from a global generator that a test file
    makes when it is imported (outside any function), and each use of
    Python's ``random``."""
    found, tree = [], ast.parse(source)
    inside_functions = {id(inner) for node in ast.walk(tree)
                        if isinstance(node, (ast.FunctionDef, ast.Lambda))
                        for inner in ast.walk(node) if inner is not node}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name == "random" for a in node.names):
            found.append(f"{node.lineno}: import random")
        if (id(node) in inside_functions or not isinstance(node, ast.Call)
                or not isinstance(node.func, ast.Attribute)):
            continue
        call, owner = node.func.attr, ast.unparse(node.func.value)
        if owner == "torch" and call in TORCH_DRAWS | {"manual_seed"} and \
                "generator" not in {k.arg for k in node.keywords}:
            found.append(f"{node.lineno}: torch.{call}")
        elif owner in ("np.random", "numpy.random") and call not in NUMPY_SEEDED:
            found.append(f"{node.lineno}: {owner}.{call}")
    return found


def test_the_scan_finds_each_kind_of_import_time_draw():
    source = textwrap.dedent("""
        import random
        x = torch.randn(2, 3)
        y = torch.rand(2, generator=gen)          # seeded: fine
        torch.manual_seed(0)
        z = np.random.rand(3)
        g = np.random.default_rng(1)              # seeded: fine

        class Model:
            weight = torch.randint(0, 5, (2,))

        def test_inside():
            torch.randn(2)                        # the fixture's business
    """)
    assert import_time_draws(source) == ["2: import random", "3: torch.randn",
                                         "5: torch.manual_seed", "6: np.random.rand",
                                         "10: torch.randint"]


def test_no_test_file_draws_from_a_global_generator_at_import():
    found = {path.name: draws for path in sorted(TESTS.glob("test_*.py")) + [TESTS / "helpers.py"]
             if (draws := import_time_draws(path.read_text()))}
    assert not found, found


def test_a_test_that_draws_from_a_global_generator_fails(tmp_path):
    """conftest.py's fixture, run on tests written to break it: the draws from
    torch's and numpy's global generators fail (an error at teardown, naming
    the generator, after the call passed); rng and torch_seeded pass."""
    (tmp_path / "conftest.py").write_text((TESTS / "conftest.py").read_text())
    (tmp_path / "test_draws.py").write_text(textwrap.dedent("""
        import numpy as np
        import torch

        def test_torch(): torch.randn(2)
        def test_numpy(): np.random.rand(2)
        def test_rng(rng): rng.random(2)
        def test_seeded(torch_seeded): torch.randn(2)
    """))
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:nbval",
                          "-o", "addopts=", "-q", "test_draws.py"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert "4 passed, 2 errors" in run.stdout, run.stdout + run.stderr
    for test, generator in [("test_torch", "torch"), ("test_numpy", "numpy.random")]:
        assert f"test_draws.py::{test} used the global generator(s) {generator}:" in run.stdout, test
