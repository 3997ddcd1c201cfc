"""The generic part of the benchmark: a timing helper and one routine that
times and checks every contender of a case.

A *case* is data: how to make its inputs, which contenders run on them,
which contender is the reference the others are checked against, and how
to check.  ``run_case`` does the rest for every case alike.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional


@dataclass
class Contender:
    """One implementation in a case.

    ``make()`` does the untimed setup (an ORT session, a module) and returns
    the function that is timed: ``call(inputs) -> outputs``.  A contender
    with ``skip`` set is listed but not run.  ``checked=False`` leaves its
    outputs unchecked (e.g. brute force in float32, whose tie order differs).
    ``result(outputs)`` turns the outputs into what ``Case.check`` compares;
    it runs outside the timed region.
    """

    name: str
    make: Callable[[], Callable[[dict], Any]]
    skip: Optional[str] = None
    checked: bool = True
    result: Callable[[Any], Any] = lambda outputs: outputs


@dataclass
class Case:
    """A benchmark input size with its contenders.

    ``inputs(rep)`` returns the inputs of repetition ``rep`` (fresh data per
    repetition where that matters, the same arrays otherwise); every
    contender sees the same sequence.  ``check(outputs, reference_outputs)``
    returns None when they agree, else a short description of the mismatch.
    """

    group: str
    label: str
    inputs: Callable[[int], dict]
    contenders: list[Contender]
    reference: str
    check: Callable[[Any, Any], Optional[str]]
    params: dict = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.group}/{self.label}"


@dataclass
class Timing:
    """Seconds of the timed calls; warm-up calls are not included."""

    times: list[float]

    @property
    def median(self) -> float:
        return statistics.median(self.times)


@dataclass
class Outcome:
    """What one contender did in one case."""

    name: str
    timing: Optional[Timing] = None
    skipped: Optional[str] = None
    problems: list[str] = field(default_factory=list)
    checked: bool = False

    @property
    def median(self) -> Optional[float]:
        return self.timing.median if self.timing else None

    @property
    def identical(self) -> Optional[bool]:
        """True/False when checked against the reference, None otherwise."""
        return not self.problems if self.checked else None


@dataclass
class TimingPlan:
    """``warmup`` untimed calls, then as many timed calls as fit in about
    ``budget`` seconds (judged by the last warm-up call), at least
    ``min_repeat`` and at most ``max_repeat``; the median counts.  Fast
    calls get many repetitions, which keeps the median stable on a busy
    machine; slow ones (brute force) get the minimum."""

    warmup: int = 1
    min_repeat: int = 3
    max_repeat: int = 25
    budget: float = 1.0

    def repeats_for(self, seconds_per_call: float) -> int:
        affordable = int(self.budget / max(seconds_per_call, 1e-9))
        return max(self.min_repeat, min(self.max_repeat, affordable))


def measure(call: Callable[[Any], Any], inputs_for: Callable[[int], Any], plan: TimingPlan,
            on_result: Callable[[int, Any], None] = lambda rep, out: None) -> Timing:
    """The timing helper: ``plan.warmup`` untimed calls, then timed ones
    (time.perf_counter around the call only).  Call ``rep`` gets
    ``inputs_for(rep)``; ``on_result(rep, outputs)`` sees every result,
    warm-up included, outside the timed region."""
    def timed(rep):
        inputs = inputs_for(rep)
        start = time.perf_counter()
        outputs = call(inputs)
        seconds = time.perf_counter() - start
        on_result(rep, outputs)
        return seconds

    warmup = [timed(rep) for rep in range(plan.warmup)]
    repeat = plan.repeats_for(warmup[-1]) if warmup else plan.max_repeat
    times = [timed(rep) for rep in range(plan.warmup, plan.warmup + repeat)]
    return Timing(times)


def run_case(case: Case, plan: TimingPlan, log: Callable[[str], None] = print) -> dict:
    """Times every contender of ``case`` (reference first, one contender
    after the other, so that thread pools do not compete) and checks each
    result against the reference's result for the same inputs.  Returns
    {contender name: Outcome}, in the case's order."""
    ordered = sorted(case.contenders, key=lambda c: c.name != case.reference)
    reference = ordered[0]
    reference_call = None
    reference_outputs: dict[int, Any] = {}

    def expected(rep):
        # A contender may run more repetitions than the (slower) reference.
        if rep not in reference_outputs:
            reference_outputs[rep] = reference.result(reference_call(case.inputs(rep)))
        return reference_outputs[rep]

    outcomes = {}
    for contender in ordered:
        outcome = Outcome(contender.name, skipped=contender.skip)
        outcomes[contender.name] = outcome
        if contender.skip:
            log(f"  {contender.name:<24} skipped: {contender.skip}")
            continue
        call = contender.make()
        if contender is reference:
            reference_call = call
        outcome.checked = (contender.checked and contender is not reference
                           and reference_call is not None)

        def on_result(rep, outputs, contender=contender, outcome=outcome):
            if contender is reference:
                reference_outputs[rep] = contender.result(outputs)
            elif outcome.checked:
                problem = case.check(contender.result(outputs), expected(rep))
                if problem:
                    outcome.problems.append(f"rep {rep}: {problem}")

        outcome.timing = measure(call, case.inputs, plan, on_result)
        status = f"  MISMATCH: {outcome.problems[0]}" if outcome.problems else ""
        log(f"  {contender.name:<24} {outcome.median * 1e3:10.2f} ms "
            f"(median of {len(outcome.timing.times)}){status}")
    return {c.name: outcomes[c.name] for c in case.contenders}
