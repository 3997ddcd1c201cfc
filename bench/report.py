"""Turns outcomes into the outputs: Markdown, a ratio plot, JSON."""

from __future__ import annotations

import datetime
import importlib.metadata
import os
import platform
import subprocess
from pathlib import Path

from harness import paired_ratio, ratio_spread

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("torch", "torchvision", "onnx", "onnxruntime", "scipy", "pykdtree", "numpy",
            "matplotlib")


# --- what ran where -----------------------------------------------------------------


def cpu_model() -> str:
    """The CPU as /proc/cpuinfo and sysfs name it: model name, vendor,
    family and model (which tell one generation from another when the model
    name is a virtual machine's "AMD EPYC"), and the caches of one core."""
    fields: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
    except OSError:
        return platform.processor() or "unknown"
    caches = []
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            level, kind, size = ((index / name).read_text().strip()
                                 for name in ("level", "type", "size"))
        except OSError:
            continue
        if kind != "Instruction":
            caches.append(f"L{level}{'d' if kind == 'Data' else ''} {size}")
    identity = ", ".join(f"{label} {fields[key]}" for label, key in
                         (("vendor", "vendor_id"), ("family", "cpu family"), ("model", "model"))
                         if key in fields)
    return (f"{fields.get('model name', platform.processor() or 'unknown')} ({identity}"
            + (f"; caches {', '.join(caches)}" if caches else "") + ")")


def _git(*args) -> str:
    done = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else "?"


THREAD_VARIABLES = ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "OPENBLAS_NUM_THREADS")


def environment(threads: int) -> dict:
    from customops.ops import _C  # through ops: torch first, whose libraries _C links against
    from customops.ort import library_path

    library = Path(library_path())
    dirty = _git("status", "--porcelain", "--", "csrc", "customops", "setup.py")
    return {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "cpu": cpu_model(),
        "vector_code": _C.vector_code(),  # the kernels' choice on this CPU (AVX-512, AVX2, ...)
        "cores": os.cpu_count(),
        "threads": threads,
        "python": platform.python_version(),
        "versions": {name: importlib.metadata.version(name) for name in PACKAGES},
        "commit": _git("rev-parse", "--short", "HEAD") + (" + uncommitted changes" if dirty else ""),
        "library_built": datetime.datetime.fromtimestamp(library.stat().st_mtime)
        .astimezone().isoformat(timespec="seconds"),
        "load_average": os.getloadavg(),
        # what bench/run.py set before the OpenMP and BLAS runtimes loaded
        "thread_environment": {name: os.environ.get(name, "unset") for name in THREAD_VARIABLES},
    }


# --- numbers -----------------------------------------------------------------------


def ratio_value(outcomes: dict, ratio, statistic=paired_ratio):
    """statistic of the ratio's two contenders' rounds: by default the median
    of the per-round ratios (harness.paired_ratio); None if one is missing."""
    num, den = outcomes.get(ratio.numerator), outcomes.get(ratio.denominator)
    if num is None or den is None:
        return None
    return statistic(num, den)


def check_text(outcomes: dict) -> str:
    checked = [o for o in outcomes.values() if o.identical is not None]
    if not checked:
        return "n/a"
    bad = [f"{o.name}: {o.problems[0]}" for o in checked if not o.identical]
    return "yes" if not bad else "no (" + "; ".join(bad) + ")"


def to_json(env, settings, groups, results, target_rows, extras) -> dict:
    def contender(o):
        return {"median_s": o.median, "times_s": o.times,
                "skipped": o.skipped, "identical": o.identical, "problems": o.problems}

    return {
        "environment": env,
        "settings": settings,
        "groups": [{
            "name": g.name, "title": g.title, "check": g.check_label, "notes": g.notes,
            "cases": [{
                "label": case.label, "params": case.params, "reference": case.reference,
                "contenders": {n: contender(o) for n, o in results[case.key].items()},
                "ratios": {r.label: ratio_value(results[case.key], r) for r in g.ratios},
            } for case in g.cases],
        } for g in groups],
        "targets": target_rows,
        **extras,
    }


def evaluate_targets(targets, groups, results) -> list[dict]:
    ratios = {g.name: {r.label: r for r in g.ratios} for g in groups}
    rows = []
    for target in targets:
        group = target.case.split("/", 1)[0]
        value = spread = None
        if target.case in results and target.ratio in ratios.get(group, {}):
            value = ratio_value(results[target.case], ratios[group][target.ratio])
            spread = ratio_value(results[target.case], ratios[group][target.ratio], ratio_spread)
        rows.append({"target": target.text, "case": target.case, "ratio": target.ratio,
                     "value": value, "spread": spread,
                     "limit": target.limit, "at_most": target.at_most,
                     "verdict": target.verdict(value)})
    return rows


def target_lines(rows) -> list[str]:
    lines = []
    for row in rows:
        value = "not measured" if row["value"] is None else f"{row['value']:.2f}x"
        if row["spread"]:
            value += " (middle half of the rounds {:.2f}-{:.2f}x)".format(*row["spread"])
        bound = f"{'<=' if row['at_most'] else '>='} {row['limit']:.3g}x"
        lines.append(f"{row['verdict']}: {row['target']} ({row['ratio']} = {value}, "
                     f"needs {bound})")
    return lines


# --- Markdown ------------------------------------------------------------------------


def fmt_ms(seconds: float) -> str:
    ms = seconds * 1e3
    for limit, digits in ((100, 0), (10, 1), (1, 2), (0.1, 3)):
        if ms >= limit:
            return f"{ms:.{digits}f}"
    return f"{ms:.4f}"


def _row(cells) -> str:
    return "| " + " | ".join(cells) + " |"


def group_table(group, results) -> list[str]:
    names = [c.name for c in group.cases[0].contenders]
    header = ["case", *[f"{n} (ms)" for n in names], *[r.label for r in group.ratios],
              group.check_label]
    lines = [_row(header), _row(["---"] + ["---:"] * (len(header) - 2) + ["---"])]
    for case in group.cases:
        outcomes = results[case.key]
        times = [o.skipped if o.skipped else fmt_ms(o.median) for o in outcomes.values()]
        ratios = [(lambda v: "n/a" if v is None else f"{v:.2f}x")(ratio_value(outcomes, r))
                  for r in group.ratios]
        lines.append(_row([case.label, *times, *ratios, check_text(outcomes)]))
    return lines


def markdown(env, settings, groups, results, target_rows, suite_lines) -> str:
    versions = ", ".join(f"{k} {v}" for k, v in env["versions"].items())
    busy = env["load_average"][0] > env["cores"]
    lines = [
        "# customops benchmark",
        "",
        *([f"**Busy machine: load average {env['load_average'][0]:.1f} on {env['cores']} "
           "cores when the run started; times are noisy and thread scaling is "
           "understated.**", ""] if busy else []),
        f"- date: {env['date']}",
        f"- machine: {env['cpu']}, {env['cores']} cores, kernels' vector code "
        f"{env['vector_code']}; threads used: {env['threads']}; "
        f"load average at start: {', '.join(f'{x:.1f}' for x in env['load_average'])}",
        f"- versions: Python {env['python']}, {versions}",
        f"- code: commit {env['commit']}; ORT library built {env['library_built']}",
        f"- timing: interleaved rounds, each calling every contender of a case once on "
        f"the same inputs (order shuffled, seeded); {settings['warmup']} warm-up round(s), then "
        f"{settings['min_repeat']}-{settings['max_repeat']} timed rounds (as many as fit in "
        f"{settings['budget']:g} s per contender and case); time.perf_counter around the "
        "call only.  Times are medians; every ratio is ours / reference (< 1: ours "
        "faster), the median of the per-round ratios.  ORT sessions run with "
        "session.intra_op.allow_spinning = 0; environment: "
        + ", ".join(f"{k}={v}" for k, v in env["thread_environment"].items()) + ".",
        "- this machine is shared: absolute times are noisy; the ratios, measured side "
        "by side, are what to read.",
    ]
    for group in groups:
        lines += ["", f"## {group.title}", "", *group_table(group, results)]
        lines += [""] + [f"- {note}" for note in group.notes] if group.notes else []
    lines += ["", "## Targets", "", "```", *target_lines(target_rows), "```"]
    if suite_lines:
        lines += ["", *suite_lines]
    return "\n".join(lines) + "\n"


# --- plot ------------------------------------------------------------------------------


def plot(groups, results, target_rows, path: Path) -> None:
    """One panel per group; a horizontal bar per (case, ratio), every ratio
    ours / reference on one log axis, with a whisker over the middle half of
    its rounds, a line at 1 (left of it: ours faster) and a marker at each
    target's limit, green when met, red when not."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = []  # (group, [(label, value, ratio index, (case key, ratio label), spread)])
    for group in groups:
        bars = [(case.label, value, i, (case.key, ratio.label),
                 ratio_value(results[case.key], ratio, ratio_spread) or (value, value))
                for case in group.cases for i, ratio in enumerate(group.ratios)
                if (value := ratio_value(results[case.key], ratio)) is not None]
        if bars:
            panels.append((group, bars))
    if not panels:
        return
    targets = {(row["case"], row["ratio"]): row for row in target_rows}
    values = [b[1] for _, bars in panels for b in bars]
    values += [row["limit"] for row in target_rows]
    span = (min(values) / 1.6, max(values) * 1.6)
    heights = [len(bars) * 0.3 + 0.9 for _, bars in panels]
    fig, axes = plt.subplots(len(panels), 1, figsize=(12, sum(heights) + 1.0), sharex=True,
                             gridspec_kw={"height_ratios": heights}, squeeze=False)
    palette = plt.get_cmap("tab10")
    for ax, (group, bars) in zip(axes[:, 0], panels):
        y = list(range(len(bars)))[::-1]
        colors = [palette(b[2] % 10) for b in bars]
        ax.barh(y, [b[1] for b in bars], color=colors, height=0.75)
        # whiskers: the middle half of the per-round ratios
        ax.errorbar([b[1] for b in bars], y, fmt="none", ecolor="black", elinewidth=0.8,
                    capsize=2, xerr=[[b[1] - b[4][0] for b in bars],
                                     [b[4][1] - b[1] for b in bars]])
        for yi, (_, value, _, key, spread) in zip(y, bars):
            ax.text(max(value, spread[1]), yi, f" {value:.2f}", va="center", fontsize=7)
            row = targets.get(key)
            if row is not None:
                ax.plot(row["limit"], yi, marker="D", markersize=6, zorder=3,
                        color="tab:green" if row["verdict"] == "PASS" else "tab:red",
                        markeredgecolor="black")
        ax.set_yticks(y, [b[0] for b in bars], fontsize=7)
        ax.axvline(1.0, color="black", linewidth=0.9)
        ax.set_title(group.title, fontsize=9, loc="left")
        handles = [plt.Rectangle((0, 0), 1, 1, color=palette(i % 10))
                   for i in range(len(group.ratios))]
        ax.legend(handles, [r.label for r in group.ratios], fontsize=7, loc="upper left",
                  bbox_to_anchor=(1.01, 1.0))
        ax.set_xscale("log")
        ax.set_xlim(*span)
    axes[-1, 0].set_xlabel("ours / reference: median of per-round time ratios (log scale; "
                           "< 1: ours faster)\nwhisker: middle half of the rounds; diamond: target limit "
                           "(green met, red missed)")
    verdicts = [r["verdict"] for r in target_rows]
    summary = ", ".join(f"{verdicts.count(v)} {v}" for v in ("PASS", "FAIL", "N/A")
                        if v in verdicts)
    fig.suptitle(f"customops benchmark (targets: {summary})", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.98))
    fig.savefig(path, dpi=110)
    plt.close(fig)
