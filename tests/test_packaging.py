"""raglab as a package: pyproject's dependency ranges agree with the tested pins, and the wheel installs into a
fresh venv (with constraints.txt) and gives a working `lab`."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures" / "metrics"


def _canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _pins() -> dict[str, str]:
    lines = (ROOT / "constraints.txt").read_text().splitlines()
    return {_canon(n): v for n, v in (ln.strip().split("==") for ln in lines if "==" in ln and not ln.startswith("#"))}


def _names(requirements_file: str) -> set[str]:
    lines = (ROOT / requirements_file).read_text().splitlines()
    return {_canon(Requirement(ln.split("#")[0].strip()).name) for ln in lines if ln.split("#")[0].strip()}


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_dependencies_cover_requirements_and_admit_the_tested_pins():
    project, pins = _project(), _pins()
    deps = [Requirement(d) for d in project["dependencies"]]
    assert {_canon(r.name) for r in deps} == _names("requirements.txt")
    extras = project["optional-dependencies"]
    assert {"ray", "postgres", "docs", "dev"} <= set(extras)
    runtime_extras = extras["ray"] + extras["postgres"]
    assert {_canon(Requirement(d).name) for d in runtime_extras} == _names("requirements-extras.txt")
    for req in deps + [Requirement(d) for group in extras.values() for d in group]:
        pin = pins.get(_canon(req.name))
        assert pin is not None, f"{req.name}: no pin in constraints.txt"
        assert req.specifier.contains(pin, prereleases=True), f"{req}: the tested pin {pin} is outside the range"


def test_opt_in_llm_pins_agree_everywhere():
    """requirements-llms.txt, pyproject's extras qwen/gemma, constraints.txt and the registry of
    lab.models.packaged_gguf pin the same exact versions (the sha256 pin is only valid for those)."""
    from lab.models.packaged_gguf import PACKAGED_GGUFS

    extras, pins = _project()["optional-dependencies"], _pins()
    listed = [Requirement(ln.split("#")[0].strip()) for ln in (ROOT / "requirements-llms.txt").read_text().splitlines()
              if ln.split("#")[0].strip()]
    registry = {_canon(dist): version for m in PACKAGED_GGUFS for dist, version, _ in m.parts}
    assert {_canon(r.name): str(r.specifier) for r in listed} == {n: f"=={v}" for n, v in registry.items()}
    assert {_canon(Requirement(d).name): str(Requirement(d).specifier) for d in extras["qwen"] + extras["gemma"]} == \
        {n: f"=={v}" for n, v in registry.items()}
    assert {n: pins.get(n) for n in registry} == registry
    assert not set(registry) & _names("requirements-extras.txt")  # opt-in: not installed by `make setup`


@pytest.mark.slow
def test_wheel_installs_into_a_fresh_venv_and_lab_works(tmp_path):
    """Builds the wheel, installs it with constraints.txt into a new venv (no system site-packages) and runs
    `lab --help` and `lab evaluate` there, from a folder outside the repository. ~10 min on two cores."""
    dist, venv, src = tmp_path / "dist", tmp_path / "venv", tmp_path / "src"
    src.mkdir()  # build from a copy: setuptools leaves build/ and *.egg-info beside the sources it builds
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    shutil.copytree(ROOT / "lab", src / "lab", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist),
                    str(src)], check=True, timeout=600)
    wheel = next(dist.glob("raglab-*.whl"))
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "-c", str(ROOT / "constraints.txt"),
                    str(wheel)], check=True, timeout=3000, env=env, cwd=tmp_path)
    lab = str(venv / "bin" / "lab")
    help_ = subprocess.run([lab, "--help"], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert help_.returncode == 0 and "evaluate" in help_.stdout, help_.stderr
    ev = subprocess.run([lab, "evaluate", str(FIX / "qrels.txt"), str(FIX / "run.txt"), "--metrics", "ndcg@10",
                         "--json"], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert ev.returncode == 0, ev.stderr
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import lab; print(lab.__file__)"],
                           capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300).stdout
    assert str(venv) in where  # the installed copy ran, not the checkout

    from lab.data.beir import read_qrels
    from lab.data.trec import read_trec_run
    from lab.metrics import evaluate

    expected = evaluate(read_qrels(FIX / "qrels.txt"), read_trec_run(FIX / "run.txt"), ["ndcg@10"]).means["ndcg@10"]
    assert json.loads(ev.stdout)["ndcg@10"] == pytest.approx(expected)
