"""Strip outputs from notebooks so git holds only code: ``python scripts/strip_notebooks.py [--check] [PATH ...]``.

Stripped means: every code cell has ``outputs == []`` and ``execution_count is None``, and no cell or notebook
metadata left by an execution (papermill, execution timings, widgets). PATHs are notebooks or folders
(default: notebooks/ at the repo root). ``--check`` changes nothing and exits 1 listing what is not stripped.
Only outputs and runtime metadata go: cell sources stay, so each notebook still agrees with its jupytext ``.py``
pair (``make notebooks`` runs ``jupytext --sync`` first, then this).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat

#: Metadata keys written by executions (papermill, nbclient, JupyterLab, widgets); never kept in git.
RUNTIME_CELL_KEYS = ("execution", "papermill", "collapsed", "scrolled", "jupyter")
RUNTIME_NB_KEYS = ("papermill", "widgets", "varInspector")


def problems(nb) -> list[str]:
    """What keeps ``nb`` (an nbformat NotebookNode) from being stripped; empty when it is."""
    out = [f"notebook metadata '{k}'" for k in RUNTIME_NB_KEYS if k in nb.metadata]
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            if cell.get("outputs"):
                out.append(f"cell {i}: {len(cell.outputs)} output(s)")
            if cell.get("execution_count") is not None:
                out.append(f"cell {i}: execution_count {cell.execution_count}")
        out += [f"cell {i}: metadata '{k}'" for k in RUNTIME_CELL_KEYS if k in cell.get("metadata", {})]
    return out


def strip(nb):
    """``nb`` with outputs, execution counts and runtime metadata removed (in place; also returned)."""
    for k in RUNTIME_NB_KEYS:
        nb.metadata.pop(k, None)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
        for k in RUNTIME_CELL_KEYS:
            cell.metadata.pop(k, None)
    return nb


def notebook_paths(paths: list[str]) -> list[Path]:
    """The .ipynb files named or under the folders named (checkpoints skipped), sorted."""
    out: list[Path] = []
    for p in map(Path, paths):
        found = sorted(p.rglob("*.ipynb")) if p.is_dir() else [p]
        out += [f for f in found if ".ipynb_checkpoints" not in f.parts]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="*", default=[str(Path(__file__).resolve().parents[1] / "notebooks")])
    ap.add_argument("--check", action="store_true", help="only report; exit 1 if any notebook is not stripped")
    args = ap.parse_args(argv)
    bad = 0
    for path in notebook_paths(args.paths):
        nb = nbformat.read(path, as_version=4)
        found = problems(nb)
        if not found:
            continue
        if args.check:
            bad += 1
            print(f"{path}: not stripped: {'; '.join(found[:5])}" + (" ..." if len(found) > 5 else ""))
        else:
            nbformat.write(strip(nb), path)
            print(f"{path}: stripped ({len(found)} item(s))")
    if bad:
        print(f"{bad} notebook(s) not stripped; run: python scripts/strip_notebooks.py", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
