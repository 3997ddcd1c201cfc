"""The generic part of the benchmark: one routine that times and checks
every contender of a case, interleaved.

A *case* is data: how to make its inputs, which contenders run on them,
which contender is the reference the others are checked against, and how
to check.  ``run_case`` does the rest for every case alike.

Why interleaved: on a shared machine the load changes from second to
second.  Timing contender A for a while and then contender B lets such
drift land in the ratio.  Here every repetition ("round") calls each
contender once on the same inputs, one after the other, and a ratio is the
median over rounds of the per-round ratio, so both sides of every pair saw
nearly the same machine.  The order within a round is shuffled (seeded), so
no contender always runs first (cold caches), and none always runs right
after the same other one: a rotation would keep the cyclic order, and
whatever a contender leaves behind (a thread pool still awake, memory just
handed back to the system) would always land on the same neighbour.
"""

from __future__ import annotations

import random
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
    it runs outside the timed region.  ``check``, when given, replaces the
    case's check for this contender (another tie rule, say).
    """

    name: str
    make: Callable[[], Callable[[dict], Any]]
    skip: Optional[str] = None
    checked: bool = True
    result: Callable[[Any], Any] = lambda outputs: outputs
    check: Optional[Callable[[Any, Any], Optional[str]]] = None


@dataclass
class Case:
    """A benchmark input size with its contenders.

    ``inputs(rep)`` returns the inputs of round ``rep`` (fresh data per
    round where that matters, the same arrays otherwise); every contender
    sees the same inputs in a round.  ``check(outputs, reference_outputs)``
    returns None when they agree, else a short description of the mismatch.
    """

    group: str
    label: str
    inputs: Callable[[int], dict]
    contenders: list[Contender]
    reference: str
    check: Callable[[Any, Any], Optional[str]]
    params: dict = field(default_factory=dict)
    # Timed rounds at least, whatever the plan: for a case whose slowest
    # contender would leave the plan's budget only a few rounds to judge the
    # fast ones by.
    min_rounds: int = 0

    @property
    def key(self) -> str:
        return f"{self.group}/{self.label}"


@dataclass
class Outcome:
    """What one contender did in one case: ``times[r]`` is its time in
    round r (warm-up rounds excluded), aligned across the case's contenders."""

    name: str
    times: Optional[list[float]] = None
    skipped: Optional[str] = None
    problems: list[str] = field(default_factory=list)
    checked: bool = False

    @property
    def median(self) -> Optional[float]:
        return statistics.median(self.times) if self.times else None

    @property
    def identical(self) -> Optional[bool]:
        """True/False when checked against the reference, None otherwise."""
        return not self.problems if self.checked else None


def round_ratios(numerator: Outcome, denominator: Outcome) -> list[float]:
    """numerator time / denominator time, one per round (none if either was skipped)."""
    if not numerator.times or not denominator.times:
        return []
    return [n / d for n, d in zip(numerator.times, denominator.times)]


def paired_ratio(numerator: Outcome, denominator: Outcome) -> Optional[float]:
    """Median over rounds of numerator time / denominator time."""
    ratios = round_ratios(numerator, denominator)
    return statistics.median(ratios) if ratios else None


def ratio_spread(numerator: Outcome, denominator: Outcome) -> Optional[tuple[float, float]]:
    """The middle half of the per-round ratios (first and third quartile):
    how far one round's verdict could fall from the median's."""
    ratios = round_ratios(numerator, denominator)
    if len(ratios) < 2:
        return None
    quartiles = statistics.quantiles(ratios, n=4, method="inclusive")
    return quartiles[0], quartiles[2]


@dataclass
class TimingPlan:
    """``warmup`` untimed rounds, then as many timed rounds as fit in about
    ``budget`` seconds per contender (judged by the last warm-up round), at
    least ``min_repeat`` and at most ``max_repeat``.  Fast cases get many
    rounds, which keeps the medians stable on a busy machine; slow ones (brute
    force) get the minimum."""

    warmup: int = 1
    min_repeat: int = 5
    max_repeat: int = 1001
    budget: float = 1.0

    def rounds_for(self, seconds_per_round: float, contenders: int) -> int:
        affordable = int(self.budget * contenders / max(seconds_per_round, 1e-9))
        return max(self.min_repeat, min(self.max_repeat, affordable))


def run_case(case: Case, plan: TimingPlan, log: Callable[[str], None] = print) -> dict:
    """Times every contender of ``case`` in interleaved rounds and checks
    each result against the reference's result of the same round (warm-up
    rounds included).  Returns {contender name: Outcome}, in the case's order."""
    active = [c for c in case.contenders if not c.skip]
    outcomes = {c.name: Outcome(c.name, skipped=c.skip) for c in case.contenders}
    calls = {c.name: c.make() for c in active}  # every session exists before timing
    has_reference = any(c.name == case.reference for c in active)
    for c in active:
        outcomes[c.name].checked = c.checked and has_reference and c.name != case.reference

    def one_round(rep: int) -> dict:
        inputs = case.inputs(rep)
        order = list(active)
        random.Random(rep).shuffle(order)
        seconds, results = {}, {}
        for contender in order:
            start = time.perf_counter()
            outputs = calls[contender.name](inputs)
            seconds[contender.name] = time.perf_counter() - start
            results[contender.name] = contender.result(outputs)
            del outputs
        for contender in active:
            outcome = outcomes[contender.name]
            if outcome.checked:
                check = contender.check or case.check
                problem = check(results[contender.name], results[case.reference])
                if problem:
                    outcome.problems.append(f"round {rep}: {problem}")
        return seconds

    warm = [one_round(rep) for rep in range(plan.warmup)]
    rounds = plan.rounds_for(sum(warm[-1].values()), len(active)) if warm else plan.max_repeat
    rounds = max(rounds, case.min_rounds)
    timed = [one_round(rep) for rep in range(plan.warmup, plan.warmup + rounds)]
    for contender in active:
        outcome = outcomes[contender.name]
        outcome.times = [seconds[contender.name] for seconds in timed]
        status = f"  MISMATCH: {outcome.problems[0]}" if outcome.problems else ""
        log(f"  {contender.name:<24} {outcome.median * 1e3:10.3f} ms "
            f"(median of {rounds} rounds){status}")
    for contender in case.contenders:
        if contender.skip:
            log(f"  {contender.name:<24} {contender.skip}")
    return {c.name: outcomes[c.name] for c in case.contenders}
