"""The package's layers: which module may import which, checked on the real import graph of ``lab``.

The graph is grimp's (the library behind import-linter): every ``import`` of a lab module by a lab module, at module
level or inside a function, with its line. Third-party packages are not in it, so a lazy ``import torch`` anywhere
is fine. The contracts:

(a) layers, bottom to top: a module imports only from its own layer or a layer below (import-linter's layers
    contract, which also names every subpackage of ``lab`` that is in no layer);
(b) no import cycle between the units of one level: between the subpackages of ``lab``, and between the modules
    of each subpackage (a cycle is printed module by module, with the line of each import);
(c) nothing outside ``lab.cli`` imports ``lab.cli`` (import-linter's protected contract; ``lab.__main__``, the
    ``python -m lab`` entry point, is the one exception);
(d) no module imports a private name (``_x``) of another lab module, nor a private module from outside its
    package (import-linter's private_modules contract, and an AST scan for names).
"""
from __future__ import annotations

import ast
import copy
from collections import deque
from pathlib import Path

import grimp
import pytest
from importlinter import configuration
from importlinter.application import output
from importlinter.contracts.layers import LayersContract
from importlinter.contracts.private_modules import PrivateModulesContract
from importlinter.contracts.protected import ProtectedContract

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "lab"
#: Bottom to top.
LAYERS = ("core", "data", "text", "metrics", "models", "retrievers", "experiment", "tracking", "training", "testset",
          "analysis", "workbench", "cli")
#: Children of ``lab`` that are no layer: the ``python -m lab`` entry point (it imports lab.cli.main).
NOT_LAYERS = ("__main__",)
CLI_IMPORTERS = ("lab.cli", "lab.__main__")

@pytest.fixture(scope="module")
def graph():
    """lab's import graph (function-level imports included)."""
    return grimp.build_graph(PACKAGE, cache_dir=None)


def _check(contract_class, graph, **options) -> None:
    """Run one import-linter contract on a copy of ``graph``; fail with its report (the offending chains)."""
    configuration.configure()
    contract = contract_class(name=contract_class.type_name, session_options={"root_packages": [PACKAGE]},
                              contract_options=options)
    check = contract.check(copy.deepcopy(graph), verbose=False)
    if not check.kept:
        with output.console.capture() as captured:
            contract.render_broken_contract(check)
        pytest.fail(f"{contract_class.type_name} contract broken:\n{captured.get()}", pytrace=False)


def _line(graph, importer: str, imported: str) -> str:
    details = graph.get_import_details(importer=importer, imported=imported)
    return f"{importer} -> {imported} (l.{details[0]['line_number']}: {details[0]['line_contents']})" if details \
        else f"{importer} -> {imported}"


def test_each_layer_imports_only_its_own_layer_or_below(graph):
    _check(LayersContract, graph, containers=[PACKAGE], layers=list(reversed(LAYERS)), exhaustive="true",
           exhaustive_ignores=list(NOT_LAYERS))


def test_nothing_outside_lab_cli_imports_lab_cli(graph):
    _check(ProtectedContract, graph, protected_modules=["lab.cli"], allowed_importers=list(CLI_IMPORTERS))


def test_private_modules_are_imported_only_inside_their_package(graph):
    _check(PrivateModulesContract, graph, packages_with_private_modules=[PACKAGE])


def _unit(module: str, parent: str) -> str | None:
    """The child of ``parent`` that holds ``module`` (None: not under ``parent``)."""
    if not module.startswith(parent + "."):
        return None
    return parent + "." + module[len(parent) + 1:].split(".")[0]


def _shortest_cycle(edges: dict[str, dict], start: str) -> list[str] | None:
    """The shortest cycle through ``start`` in ``edges`` (breadth first), as [start, ..., start]; None: none."""
    prev, queue = {start: None}, deque([start])
    while queue:
        u = queue.popleft()
        for v in edges.get(u, {}):
            if v == start:
                path = [u]
                while prev[path[-1]] is not None:
                    path.append(prev[path[-1]])
                return list(reversed(path)) + [start]
            if v not in prev:
                prev[v] = u
                queue.append(v)
    return None


def _reaches(edges: dict[str, dict], a: str, b: str) -> bool:
    """True when ``b`` can be reached from ``a``."""
    seen, queue = {a}, deque([a])
    while queue:
        u = queue.popleft()
        for v in edges.get(u, {}):
            if v == b:
                return True
            if v not in seen:
                seen.add(v)
                queue.append(v)
    return False


def _cycles(graph, parent: str) -> list[str]:
    """Import cycles between the children of ``parent`` (each child with everything under it as one unit): for
    each group of units that import each other round, its shortest cycle, one line per import (with its line)."""
    edges: dict[str, dict[str, tuple[str, str]]] = {}  # unit -> unit it imports -> one (importer, imported)
    for module in sorted(graph.find_descendants(parent)):
        a = _unit(module, parent)
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            b = _unit(imported, parent)
            if b is not None and b != a:
                edges.setdefault(a, {}).setdefault(b, (module, imported))
    found, done = [], set()
    for unit in sorted(edges):
        if unit in done:
            continue
        group = {u for u in edges if u == unit or (_reaches(edges, unit, u) and _reaches(edges, u, unit))}
        done |= group
        cycles = [c for c in (_shortest_cycle(edges, u) for u in sorted(group)) if c]
        if cycles:
            path = min(cycles, key=len)
            found.append(" -> ".join(path) + f" (units importing each other round: {', '.join(sorted(group))}):\n"
                         + "\n".join("    " + _line(graph, *edges[a][b]) for a, b in zip(path, path[1:], strict=False)))
    return found


def test_no_import_cycle_between_subpackages_or_between_the_modules_of_one(graph):
    parents = [PACKAGE] + sorted(m for m in graph.find_children(PACKAGE) if graph.find_children(m))
    cycles = [c for p in parents for c in _cycles(graph, p)]
    if cycles:
        pytest.fail("import cycles (each import listed with its line):\n" + "\n".join(cycles), pytrace=False)


def _lab_modules():
    for path in sorted((ROOT / PACKAGE).rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        yield ".".join(parts[:-1] if parts[-1] == "__init__" else parts), path


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def test_no_module_imports_a_private_name_of_another(graph):
    """``from lab.x import _y`` and ``lab.x._y`` (through ``import lab.x`` or ``from lab import x``) are refused
    outside ``lab.x`` itself."""
    modules, bad = set(graph.modules), []
    for name, path in _lab_modules():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        aliases = {}  # local name -> lab module it is bound to
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.split(".")[0] == PACKAGE:
                        aliases[a.asname or a.name] = a.name
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                    and node.module.split(".")[0] == PACKAGE and node.module != name:
                for a in node.names:
                    if f"{node.module}.{a.name}" in modules:
                        aliases[a.asname or a.name] = f"{node.module}.{a.name}"
                    elif _private(a.name):
                        bad.append(f"{path.relative_to(ROOT)}:{node.lineno}: from {node.module} import {a.name}")
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and _private(node.attr):
                base = ast.unparse(node.value)
                target = aliases.get(base)
                if target and target != name:
                    bad.append(f"{path.relative_to(ROOT)}:{node.lineno}: {base}.{node.attr} ({target})")
    if bad:
        pytest.fail("private names of other modules imported (make them public or move them):\n" + "\n".join(bad),
                    pytrace=False)
