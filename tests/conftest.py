import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
# tools/: mutants.py, which test_mutants imports
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))


@pytest.fixture
def rng(request):
    # One stream per test, stable across runs and test selection.
    return np.random.default_rng(zlib.crc32(request.node.name.encode()))


@pytest.fixture
def torch_seeded(rng):
    """For code that draws from torch's global generator by design (a module's
    default initialisation, torch.manual_seed in the code under test): the
    generator seeded from the test's rng for the test and restored after it,
    so the draws do not depend on the tests run before."""
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(rng.integers(2**63)))
        yield


def _global_random_states():
    """The state of the global generators a test's data could come from:
    numpy's legacy one and torch's CPU generator (when loaded).  Not Python's
    ``random``: libraries draw from it for their own ends (a browser driver
    did, for a socket key); test_randomness forbids it in the tests' code."""
    legacy = np.random.get_state()
    states = {"numpy.random": (legacy[1].tobytes(), *legacy[2:])}
    if "torch" in sys.modules:
        states["torch"] = bytes(sys.modules["torch"].random.get_rng_state().numpy())
    return states


@pytest.fixture(autouse=True)
def no_global_randomness(request):
    """Fails a test that draws from torch's or numpy's global generator
    (torch.randn without a generator, torch.manual_seed, np.random.rand, an
    nn.Module's default initialisation, ...): what it draws then depends on which tests ran before
    it, so a failure cannot be replayed.  Draw from the ``rng`` fixture."""
    before = _global_random_states()
    yield
    changed = [name for name, state in _global_random_states().items()
               if name in before and state != before[name]]
    assert not changed, (f"{request.node.nodeid} used the global generator(s) {', '.join(changed)}: "
                         "draw from the rng fixture (or a generator seeded from it) instead")
