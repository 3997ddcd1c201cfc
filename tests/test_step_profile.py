"""The phase timers behind `make profile` (csrc/kernels/profile.h,
bench/step_profile.py): every phase of a training step is counted, the GEMM
flop counts are exact, the timers stay off unless turned on, and the script
prints a table per vector code and thread count."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import torch

import customops.ops
from customops.ops import _C

ROOT = Path(__file__).resolve().parents[1]
# Loaded from its file: bench/ on sys.path would shadow modules of the tests.
_spec = importlib.util.spec_from_file_location("step_profile", ROOT / "bench/step_profile.py")
step_profile = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(step_profile)

SIZE, C, O, TAPS = 12, 8, 16, 9
GEMM_FLOPS = 2 * SIZE * SIZE * O * C * TAPS  # each of the three GEMMs, one image


def step():
    g = torch.Generator().manual_seed(0)
    x, offset = torch.randn(1, C, SIZE, SIZE, generator=g), torch.randn(1, 18, SIZE, SIZE, generator=g)
    weight, bias = torch.randn(O, C, 3, 3, generator=g), torch.randn(O, generator=g)
    mask = torch.rand(1, 9, SIZE, SIZE, generator=g)
    t = [v.requires_grad_() for v in (x, offset, weight, bias, mask)]
    customops.ops.deform_conv2d(t[0], t[1], t[2], t[3], padding=(1, 1), mask=t[4]).sum().backward()


def test_every_phase_is_counted_and_the_gemm_flops_are_exact():
    _C.profile_start()
    step()
    phases = _C.profile_stop()
    assert len(phases) == len(step_profile.PHASES)
    for (name, _), (ns, calls, flops) in zip(step_profile.PHASES, phases):
        assert calls > 0 and ns > 0, name
    assert {i: phases[i][2] for i in step_profile.GEMMS} == {i: GEMM_FLOPS for i in step_profile.GEMMS}
    assert sum(flops for _, _, flops in phases) == 3 * GEMM_FLOPS


def test_the_timers_are_off_unless_started():
    _C.profile_start()
    before = _C.profile_stop()
    step()
    _C.profile_start()  # zeroes them
    assert _C.profile_stop() == [(0, 0, 0)] * len(before)
    step()
    assert _C.profile_stop() == [(0, 0, 0)] * len(before)


def test_the_script_prints_a_table_with_every_phase():
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench/step_profile.py"), "--sizes", "16", "--threads", "1,2",
         "--steps", "2", "--isa", "baseline"],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    titles = [line for line in done.stdout.splitlines() if line.startswith("###")]
    assert [t.split(":")[0] for t in titles] == ["### baseline, 1 thread, 16x16",
                                                 "### baseline, 2 threads, 16x16"]
    for name, _ in step_profile.PHASES:
        assert done.stdout.count(f"| {name}") == 2, name
