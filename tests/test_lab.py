"""`make lab` builds everything the notebooks use before JupyterLab starts, so
every notebook runs top to bottom from a fresh clone.  The Makefile's own
database (`make -pq`) gives lab's prerequisites; each notebook's code cells
give what it uses; the two must agree in both directions."""

from __future__ import annotations

import json
import re
import subprocess
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
CHROMIUM = "/usr/bin/chromium"

# What a code cell uses -> the make target that provides it.
USES = {
    "setup": re.compile(r"^\s*(import customops|from customops\b)", re.M),  # package + ORT library
    "headers": re.compile(r"\bcustomops\.headers\b"),  # ORT C/C++ headers for g++ lines
    "ort-venvs": re.compile(r"\bort_python\("),  # another onnxruntime release
    "torch-envs": re.compile(r"\btorch_python\("),  # another torch release
    CHROMIUM: re.compile(r"\bnetron_view\("),  # static Netron picture
}
# A file of the repository's build/ that a notebook runs or reads (notebooks run in notebooks/).
BUILD_PATH = re.compile(r"\.\./(build/[\w./-]+)")
ORT_RELEASE = re.compile(r"""\bort_python\(\s*["'](\d+\.\d+\.\d+)["']""")
TORCH_ENV = re.compile(r"""\btorch_python\(\s*["']([\w.+]+)["'],\s*["']onnxruntime==([\d.]+)["']\)""")


def code(notebook: Path) -> str:
    cells = json.loads(notebook.read_text())["cells"]
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")


@cache
def database() -> tuple[dict[str, list[str]], dict[str, str]]:
    """Rules {target: prerequisites} and simple variables, as make reads them."""
    done = subprocess.run(["make", "-pq", "lab"], cwd=ROOT, capture_output=True, text=True)
    rules, variables = {}, {}
    for line in done.stdout.splitlines():
        if line.startswith(("#", "\t")) or not line.strip():
            continue
        if match := re.fullmatch(r"([A-Za-z_][\w]*) :?= ?(.*)", line):
            variables[match[1]] = match[2]
        elif match := re.fullmatch(r"([^\s:=][^:=]*?):(?![:=])\s*(.*)", line):
            prerequisites = match[2].replace("|", " ").split()
            rules.setdefault(match[1], []).extend(prerequisites)
    assert "lab" in rules, done.stderr
    return rules, variables


def closure(target: str) -> set[str]:
    rules, _ = database()
    seen, todo = set(), [target]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(rules.get(name, []))
    return seen


def needs(notebook: Path) -> set[str]:
    """The make targets and build/ files the notebook's code uses."""
    source = code(notebook)
    return ({target for target, pattern in USES.items() if pattern.search(source)}
            | set(BUILD_PATH.findall(source)))


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_make_lab_builds_what_the_notebook_uses(notebook):
    missing = needs(notebook) - closure("lab")
    assert not missing, f"{notebook.name} needs {sorted(missing)}, which `make lab` does not build"


def test_make_lab_builds_nothing_no_notebook_uses():
    """Each prerequisite of lab is used by a notebook itself, or names a
    build/ file a notebook uses among its own prerequisites (cpp: build/cpp/run_model)."""
    rules, _ = database()
    used = set().union(*(needs(nb) for nb in NOTEBOOKS))
    files = {need for need in used if need.startswith("build/")}
    unused = [t for t in rules["lab"] if t not in used and not files & set(rules.get(t, []))]
    assert not unused, f"prerequisites of lab that no notebook uses: {unused}"


def test_the_ort_releases_the_notebooks_run_are_the_ones_make_lab_installs():
    _, variables = database()
    prepared = set(variables["NOTEBOOK_ORT_RELEASES"].split())
    used = {v for nb in NOTEBOOKS for v in ORT_RELEASE.findall(code(nb))}
    assert used == prepared


def test_the_torch_envs_the_notebooks_run_are_the_ones_make_lab_installs():
    _, variables = database()
    prepared = {(v, variables["TORCH_ENV_ORT"]) for v in variables["NOTEBOOK_TORCH_RELEASES"].split()}
    used = {pair for nb in NOTEBOOKS for pair in TORCH_ENV.findall(code(nb))}
    assert used == prepared


def test_make_test_builds_what_make_lab_builds():
    """The notebooks run under nbval in `make test`: from a fresh clone it
    must build their needs too, not only the package."""
    rules, _ = database()
    assert set(rules["lab"]) <= closure("test")


def test_the_cpp_program_of_notebook_08_is_what_make_lab_builds():
    """The known case: 08 runs build/cpp/run_model (it stopped with "build the
    C++ program first: make cpp" before lab built it)."""
    assert "build/cpp/run_model" in needs(ROOT / "notebooks/08_end_to_end.ipynb")
    rules, _ = database()
    assert "build/cpp/run_model" in rules["cpp"] and "cpp" in rules["lab"]


@pytest.mark.parametrize("target, command", [
    ("headers", "-m customops.headers"),
    ("ort-venvs", "-m customops.envs onnxruntime=="),
    ("torch-envs", "-m customops.envs torch=="),
])
def test_the_targets_run_the_tools_the_notebooks_call(target, command):
    done = subprocess.run(["make", "-n", target], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert command in done.stdout
