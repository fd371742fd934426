"""The tests mirror the package: every module of a layer that defines a function or a class has
``tests/<layer>/test_<module>.py``, and every test file of a layer folder is named after a module of that layer
(``test_<module>.py``, or ``test_<module>_<aspect>.py`` for a second file on one module).

Files that do not fit yet are listed below, each list with its reason; an entry that starts to fit must leave its
list (the last test checks it), so the lists only shrink.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest
from test_layers import LAYERS

ROOT = Path(__file__).resolve().parents[1]
LAB, TESTS = ROOT / "lab", ROOT / "tests"

#: Modules with behaviour but no test file of their name: the command group's tests live in the layer test of what
#: the command runs, or the module is tested through its one caller (named after each entry).
MODULES_WITHOUT_TESTS = {
    "cli/report",  # `lab report`, `lab gate`: tests/analysis/test_report.py, tests/analysis/test_gate.py
    "cli/train",  # `lab train-reranker`, `lab train-embedder`: tests/training/test_reranker.py, test_embedder.py
    "testset/track",  # log_testset_run: through tests/testset/test_generate.py and test_judge.py
    "training/dense_ft",  # the dense_ft strategy: tests/training/test_embedder.py
}

#: Test files in a layer folder that name no module of it. Cross-cutting: a promise kept by several modules at once
#: (one test file per promise).
TESTS_NOT_NAMED_AFTER_A_MODULE = {
    # cross-cutting
    "cli/test_exposure.py",  # servers bind loopback: `lab ui`, `lab notebook`, python -m lab.experiment.serve
    "cli/test_storage_faults.py",  # a corrupt, read-only or full store through every command that opens it
    "workbench/test_notebooks.py",  # the notebooks/ folder, each notebook run by Papermill
}


def _defines_something(path: Path) -> bool:
    """True when the module defines a function or a class at its top level (a module of constants has none)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return any(isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) for node in tree.body)


def _modules() -> dict[str, Path]:
    """``layer/module`` (``layer/package/module`` inside a package of a layer) -> path, for the modules of every
    layer (``__init__`` left out)."""
    return {p.relative_to(LAB).with_suffix("").as_posix(): p for layer in LAYERS
            for p in sorted((LAB / layer).rglob("*.py")) if p.stem != "__init__"}


def _test_file(key: str) -> Path:
    *folders, module = key.split("/")
    return TESTS.joinpath(*folders) / f"test_{module}.py"


def _test_files() -> list[str]:
    """``layer/test_x.py`` (``layer/package/test_x.py``) for the test files of every layer folder."""
    return [p.relative_to(TESTS).as_posix() for layer in LAYERS for p in sorted((TESTS / layer).rglob("test_*.py"))]


def _names_a_module(rel: str) -> bool:
    *folders, name = rel.split("/")
    stem = name.removeprefix("test_").removesuffix(".py")
    modules = {p.stem for p in LAB.joinpath(*folders).glob("*.py")}
    return stem in modules or any(stem.startswith(m + "_") for m in modules)


def test_the_layers_are_the_package_folders():
    """Guards the two checks below: a new layer folder in lab/ must be in test_layers.LAYERS to be checked."""
    folders = {p.name for p in LAB.iterdir() if (p / "__init__.py").is_file()}
    assert folders == set(LAYERS)


def test_every_module_with_behaviour_has_a_test_file_of_its_name():
    missing = [f"lab/{key}.py -> {_test_file(key).relative_to(ROOT)}"
               for key, path in _modules().items()
               if _defines_something(path) and not _test_file(key).is_file() and key not in MODULES_WITHOUT_TESTS]
    assert not missing, "modules without a test file of their name:\n" + "\n".join(missing)


def test_every_test_file_of_a_layer_names_one_of_its_modules():
    stray = [rel for rel in _test_files() if not _names_a_module(rel) and rel not in TESTS_NOT_NAMED_AFTER_A_MODULE]
    assert not stray, ("test files named after no module of their layer (test_<module>.py or "
                       "test_<module>_<aspect>.py):\n" + "\n".join(stray))


@pytest.mark.parametrize("entry", sorted(MODULES_WITHOUT_TESTS))
def test_an_entry_of_the_module_list_is_still_needed(entry):
    assert entry in _modules(), f"{entry}: no such module any more; drop it from MODULES_WITHOUT_TESTS"
    assert not _test_file(entry).is_file(), f"{entry} has its test file now; drop it from MODULES_WITHOUT_TESTS"


@pytest.mark.parametrize("entry", sorted(TESTS_NOT_NAMED_AFTER_A_MODULE))
def test_an_entry_of_the_test_file_list_is_still_needed(entry):
    assert (TESTS / entry).is_file(), f"{entry}: no such test file any more; drop it from the list"
    assert not _names_a_module(entry), f"{entry} is named after a module now; drop it from the list"


def test_every_test_folder_is_a_package():
    """Test files of the same name in two layers (tests/cli/test_demo.py, tests/workbench/test_demo.py) collide
    in pytest's default import mode unless each folder is a package: one collection error stops the whole run."""
    loose = [p.relative_to(TESTS).as_posix() for p in TESTS.rglob("*") if p.is_dir() and any(p.glob("test_*.py"))
             and not (p / "__init__.py").is_file()]
    assert not loose, f"test folders without __init__.py: {loose}"
