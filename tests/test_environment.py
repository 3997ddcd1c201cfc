"""The two set-up routes install the same thing: requirements.txt (make, a
venv) and environment.yml (conda).  And the environment running the tests is
the pinned one."""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path

import pytest
import yaml  # PyYAML, installed with jupyterlab (jupyter_server -> jupyter_events)

ROOT = Path(__file__).resolve().parent.parent


def canonical(name: str) -> str:
    """PEP 503 normalised name: Torch_Vision -> torch-vision."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements() -> dict[str, str]:
    pins = {}
    for number, line in enumerate((ROOT / "requirements.txt").read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([^\s;]+)", line)
        assert match, f"requirements.txt:{number}: not an exact pin (name==version): {line!r}"
        pins[canonical(match[1])] = match[2]
    return pins


def environment() -> dict:
    return yaml.safe_load((ROOT / "environment.yml").read_text())


def conda_and_pip(env: dict) -> tuple[dict[str, str | None], dict[str, str | None]]:
    """{name: exact version or None} for the conda dependencies and for the
    `pip:` list.  Conda specs: "name", "name=1.2", "name==1.2", "name 1.2";
    a range ("name>=1") counts as no exact version."""
    conda, pip = {}, {}
    for dep in env["dependencies"]:
        if isinstance(dep, dict):
            assert set(dep) == {"pip"}, f"unexpected mapping in dependencies: {dep}"
            for line in dep["pip"]:
                match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?\s*(?:==\s*(\S+))?",
                                     line.strip())
                assert match, f"environment.yml pip entry not understood: {line!r}"
                pip[canonical(match[1])] = match[2]
            continue
        match = re.fullmatch(r"(?:[\w.-]+::)?([A-Za-z0-9][A-Za-z0-9._-]*)(.*)", str(dep).strip())
        assert match, f"environment.yml conda dependency not understood: {dep!r}"
        exact = re.fullmatch(r"(?:==?)?\s*([0-9][^\s=<>!*,|]*)(?:\s+\S+)?", match[2].strip())
        conda[canonical(match[1])] = exact[1] if exact else None
    return conda, pip


def test_every_pin_of_requirements_is_in_environment_yml_with_the_same_version():
    pins = requirements()
    conda, pip = conda_and_pip(environment())
    problems = []
    for name, version in pins.items():
        found = pip.get(name, conda.get(name, "missing"))
        if found != version:
            where = "pip:" if name in pip else "conda" if name in conda else "nowhere"
            problems.append(f"{name}: requirements.txt {version}, environment.yml ({where}) {found}")
    assert not problems, "environment.yml out of step with requirements.txt:\n" + "\n".join(problems)


def test_environment_yml_adds_nothing_unpinned_or_twice():
    pins = requirements()
    conda, pip = conda_and_pip(environment())
    assert not set(conda) & set(pip), f"in both conda and pip: {sorted(set(conda) & set(pip))}"
    # Everything pip installs is a pin of requirements.txt (no drift the other way).
    assert {n: v for n, v in pip.items() if pins.get(n) != v} == {}


def test_environment_yml_is_conda_forge_python_311_with_the_build_tools():
    env = environment()
    assert env["name"] == "customops"  # README: conda activate customops
    assert env["channels"][0] == "conda-forge"
    assert set(env["channels"]) <= {"conda-forge", "nodefaults"}, env["channels"]
    conda, pip = conda_and_pip(env)
    assert conda.get("python") == "3.11"
    for tool in ("pip", "cxx-compiler", "nodejs"):
        assert tool in conda, f"environment.yml lacks {tool}"
    assert "ninja" in conda or "ninja" in pip


@pytest.mark.parametrize("name", sorted(requirements()))
def test_installed_version_is_the_pin(name):
    """The environment running the tests is the pinned one (pip's local
    version label, as in 2.14.1+cpu, aside)."""
    pinned = requirements()[name]
    try:
        installed = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        pytest.fail(f"{name} is not installed (requirements.txt pins {pinned})")
    assert installed.split("+")[0] == pinned


def test_the_pinned_torch_is_pypis_cuda_build_running_on_the_cpu():
    """docs/versions.md: `torch==2.14.1` from PyPI is the CUDA 13.0 build (its
    NVIDIA libraries are what makes the venv large); the course runs it on the CPU."""
    import torch

    assert torch.__version__ == "2.14.1+cu130" and torch.version.cuda == "13.0"
    assert importlib.metadata.version("torch") == "2.14.1"  # the package version has no "+cu130"
    nvidia = [d.metadata["Name"] for d in importlib.metadata.distributions()
              if canonical(d.metadata["Name"]).startswith("nvidia-")]
    assert "nvidia-cublas" in map(canonical, nvidia), nvidia
    assert "`torch==2.14.1` from PyPI calls itself `2.14.1+cu130`" in (ROOT / "docs/versions.md").read_text()
