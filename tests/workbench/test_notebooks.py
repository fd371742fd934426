"""The four notebooks, the params specs and `lab demo`: static checks, then real Papermill executions.

Executions run the real notebooks in the venv's "raglab" kernel (installed by `make setup`) on tiny real slices
(ORD-QA with 5-10 queries; a SciFact slice of 10 test queries and ~50 documents with their evidence spans), with
real models, real MLflow runs in a temporary store and a temporary embedding cache shared by the module.
"""
from __future__ import annotations

import gzip
import importlib.util
import json
import re
import shutil
from pathlib import Path

import nbformat
import pytest

from lab.core.paths import repo_root

ROOT = repo_root(Path(__file__).parent)
NOTEBOOK_DIR = ROOT / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
PARAMS = sorted((ROOT / "params").glob("*.yaml"))
KERNEL = "raglab"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _script(name: str):
    """Import scripts/<name>.py as a module (scripts/ is not a package)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# ------------------------------------------------------------------------------------------------ static checks
def test_repo_root_is_found_from_anywhere_inside_and_paths_resolve_against_it(tmp_path, monkeypatch):
    from lab.core.errors import ConfigError
    from lab.core.paths import resolve_repo_path, results_dir

    monkeypatch.delenv("LAB_REPO_ROOT", raising=False)
    assert repo_root(NOTEBOOK_DIR) == ROOT and repo_root(ROOT / "lab" / "data") == ROOT
    monkeypatch.chdir(NOTEBOOK_DIR)  # as JupyterLab and the sweep run a notebook
    assert repo_root() == ROOT
    assert resolve_repo_path("data/scifact") == ROOT / "data" / "scifact"
    assert resolve_repo_path(tmp_path) == tmp_path
    assert resolve_repo_path("x/y", root=tmp_path) == tmp_path / "x" / "y"
    assert results_dir("a", "b", root=tmp_path) == tmp_path / "results" / "a" / "b"
    assert (tmp_path / "results/a/b").is_dir()
    with pytest.raises(ConfigError, match="pyproject.toml"):
        repo_root(tmp_path)
    monkeypatch.setenv("LAB_REPO_ROOT", str(tmp_path))
    with pytest.raises(ConfigError, match="LAB_REPO_ROOT"):
        repo_root()
    monkeypatch.setenv("LAB_REPO_ROOT", str(ROOT))
    monkeypatch.chdir(tmp_path)
    assert repo_root() == ROOT


def test_the_four_notebooks_exist():
    assert [p.name for p in NOTEBOOKS] == ["01_testset_generation.ipynb", "02_chunk_size_grid.ipynb",
                                           "03_strategy_comparison.ipynb", "04_embedding_comparison.ipynb"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_stripped_with_one_parameters_cell(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert _script("strip_notebooks").problems(nb) == [], f"{path.name}: run python scripts/strip_notebooks.py"
    for cell in nb.cells:  # independent of the script: the two fields git must never hold
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None
    tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1, f"{path.name}: {len(tagged)} cells tagged 'parameters'"
    assert nb.metadata.kernelspec.name == KERNEL


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_setup_is_one_call_of_the_workbench_function(path):
    """The setup each notebook used to repeat is lab.workbench.notebook.setup, called once, right after the
    parameters cell; no cell builds its own Context or sets the environment."""
    import ast

    code = [c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
    calls = [i for i, src in enumerate(code) for node in ast.walk(ast.parse(src))
             if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "setup"]
    assert calls == [1], f"{path.name}: setup(...) called in code cells {calls}, expected once, in cell 1"
    assert "from lab.workbench.notebook import setup" in code[1]
    assert not any("Context(" in src or "os.environ" in src for src in code), path.name


# ------------------------------------------------------------------------------------------------ .ipynb / .py pairs
PAIR_FORMAT = "py:percent"
SYNC = ("run: jupytext --sync notebooks/*.ipynb (the newer file of each pair wins), "
        "then python scripts/strip_notebooks.py")


def pair_differences(ipynb: Path) -> list[str]:
    """How the jupytext pair of ``ipynb`` (its ``.py`` in percent format beside it) disagrees; empty when it agrees.

    Agreeing means: the ``.py`` exists and is exactly what jupytext writes from the ``.ipynb``, and jupytext reads
    back from the ``.py`` the same cells (type, source, metadata such as the ``parameters`` tag) and kernelspec.
    """
    import jupytext

    py = ipynb.with_suffix(".py")
    if not py.is_file():
        return [f"{py.name} is missing"]
    nb, text_nb = jupytext.read(ipynb), jupytext.read(py)
    out = []
    if py.read_text(encoding="utf-8") != jupytext.writes(nb, fmt=PAIR_FORMAT):
        out.append(f"{py.name} is not what `jupytext --to {PAIR_FORMAT}` writes from {ipynb.name}")
    if len(nb.cells) != len(text_nb.cells):
        out.append(f"{ipynb.name} has {len(nb.cells)} cells, {py.name} {len(text_nb.cells)}")
    for i, (a, b) in enumerate(zip(nb.cells, text_nb.cells, strict=False)):
        for what, x, y in (("type", a.cell_type, b.cell_type), ("source", a.source, b.source),
                           ("metadata", dict(a.metadata), dict(b.metadata))):
            if x != y:
                out.append(f"cell {i}: {what} differs: {x!r:.80} in {ipynb.name}, {y!r:.80} in {py.name}")
    if nb.metadata.get("kernelspec") != text_nb.metadata.get("kernelspec"):
        out.append(f"kernelspec differs between {ipynb.name} and {py.name}")
    return out


def test_notebooks_are_paired_with_percent_scripts_by_the_jupytext_config():
    """notebooks/jupytext.toml pairs every notebook there (JupyterLab's jupytext contents manager and the jupytext
    CLI both read it), and each pair has both files."""
    from jupytext.config import find_jupytext_configuration_file, load_jupytext_config

    assert find_jupytext_configuration_file(str(NOTEBOOK_DIR)) == str(NOTEBOOK_DIR / "jupytext.toml")
    for path in NOTEBOOKS:
        assert load_jupytext_config(str(path)).formats == [f"ipynb,{PAIR_FORMAT}"]
    assert sorted(p.stem for p in NOTEBOOK_DIR.glob("*.py")) == [p.stem for p in NOTEBOOKS]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_and_its_py_agree(path):
    import jupytext

    assert pair_differences(path) == [], SYNC
    py_cells = jupytext.read(path.with_suffix(".py")).cells
    assert sum("parameters" in c.metadata.get("tags", []) for c in py_cells) == 1  # Papermill's tag, in the .py too


def test_pair_check_catches_an_edit_on_one_side(tmp_path):
    """Each one-sided edit a researcher could make (outside a jupytext-aware editor) is reported."""
    import jupytext

    src = NOTEBOOK_DIR / "03_strategy_comparison.ipynb"

    def pair(name: str) -> Path:
        folder = tmp_path / name
        folder.mkdir()
        shutil.copy(src, folder / src.name)
        shutil.copy(src.with_suffix(".py"), folder / f"{src.stem}.py")
        return folder / src.name

    assert pair_differences(pair("same")) == []
    ipynb = pair("py-edited")  # a default changed in the .py only
    py = ipynb.with_suffix(".py")
    py.write_text(py.read_text(encoding="utf-8").replace("k = 100", "k = 10"), encoding="utf-8")
    assert any(d.startswith("cell 1: source differs") for d in pair_differences(ipynb))
    ipynb = pair("ipynb-edited")  # the parameters tag dropped in the .ipynb only
    nb = nbformat.read(ipynb, as_version=4)
    nb.cells[1].metadata["tags"] = []
    nbformat.write(nb, ipynb)
    assert any(d.startswith("cell 1: metadata differs") for d in pair_differences(ipynb))
    ipynb = pair("cell-added")  # a cell added to the .ipynb only
    nb = jupytext.read(ipynb)
    nb.cells.append(nbformat.v4.new_code_cell("print('new')"))
    nbformat.write(nb, ipynb)
    assert f"{ipynb.name} has {len(nb.cells)} cells, {py.name} {len(nb.cells) - 1}" in pair_differences(ipynb)
    ipynb = pair("py-missing")
    ipynb.with_suffix(".py").unlink()
    assert pair_differences(ipynb) == [f"{ipynb.stem}.py is missing"]
    ipynb = pair("header")  # the .py's text differs though its cells read the same: still not what jupytext writes
    py = ipynb.with_suffix(".py")
    py.write_text(re.sub(r"^#\s+jupytext_version: .*\n", "", py.read_text(encoding="utf-8"), count=1, flags=re.M),
                  encoding="utf-8")  # the header's jupytext version line dropped
    assert pair_differences(ipynb) == [f"{py.name} is not what `jupytext --to py:percent` writes from {ipynb.name}"]


def test_edits_on_either_side_sync_through_the_jupytext_cli(tmp_path):
    """The documented command keeps a pair in sync: the .py edited, `jupytext --sync` updates the .ipynb (cell ids
    kept, still stripped); the .ipynb edited, it updates the .py."""
    import os
    import subprocess
    import sys

    src = NOTEBOOK_DIR / "03_strategy_comparison.ipynb"
    for name in (src.name, src.with_suffix(".py").name, "jupytext.toml"):
        shutil.copy(NOTEBOOK_DIR / name, tmp_path / name)
    ipynb, py = tmp_path / src.name, tmp_path / f"{src.stem}.py"
    jupytext_cli = [sys.executable, "-m", "jupytext", "--sync", str(ipynb)]
    ids = [c.id for c in nbformat.read(ipynb, as_version=4).cells]

    os.utime(ipynb, (1_000_000_000, 1_000_000_000))  # the .py is the newer file: it was edited
    py.write_text(py.read_text(encoding="utf-8").replace("k = 100 ", "k = 50  "), encoding="utf-8")
    subprocess.run(jupytext_cli, check=True, capture_output=True, timeout=120)
    nb = nbformat.read(ipynb, as_version=4)
    assert "k = 50" in nb.cells[1].source and [c.id for c in nb.cells] == ids
    assert _script("strip_notebooks").problems(nb) == [] and pair_differences(ipynb) == []

    os.utime(py, (1_000_000_000, 1_000_000_000))  # now the .ipynb is the newer one
    nb.cells[1].source = nb.cells[1].source.replace("k = 50  ", "k = 20  ")
    nbformat.write(nb, ipynb)
    subprocess.run(jupytext_cli, check=True, capture_output=True, timeout=120)
    assert "k = 20  " in py.read_text(encoding="utf-8") and pair_differences(ipynb) == []


def test_strip_script_strips_an_executed_notebook(tmp_path):
    strip = _script("strip_notebooks")
    nb = nbformat.read(NOTEBOOKS[0], as_version=4)
    code = next(c for c in nb.cells if c.cell_type == "code")
    code.outputs = [nbformat.v4.new_output("stream", name="stdout", text="hello\n")]
    code.execution_count = 3
    code.metadata["papermill"] = {"duration": 1.0}
    nb.metadata["papermill"] = {"parameters": {}}
    path = tmp_path / "x.ipynb"
    nbformat.write(nb, path)
    assert strip.main(["--check", str(path)]) == 1
    assert strip.main([str(path)]) == 0
    assert strip.problems(nbformat.read(path, as_version=4)) == []
    assert strip.main(["--check", str(path)]) == 0


def _parameters(notebook: Path) -> dict:
    import papermill as pm

    return pm.inspect_notebook(str(notebook))


def test_parameters_cells_follow_the_contract():
    import ast

    for path in NOTEBOOKS:
        names = set(_parameters(path))
        cell = next(c for c in nbformat.read(path, as_version=4).cells if "parameters" in c.metadata.get("tags", []))
        tree = ast.parse(cell.source)
        assert all(isinstance(node, ast.Assign) for node in tree.body), f"{path.name}: parameters are assignments only"
        assigned = {t.id for node in tree.body for t in node.targets}
        assert names == assigned, f"{path.name}: Papermill reads {sorted(names)}, the cell assigns {sorted(assigned)}"
        missing = {"dataset", "seed", "tracking_root", "experiment", "mlflow_run_id"} - names
        assert not missing, f"{path.name}: parameters {missing} missing"
        if not path.name.startswith("01"):
            missing = {"strategy", "params", "chunking", "split", "k", "max_queries"} - names
            assert not missing, f"{path.name}: parameters {missing} missing"


@pytest.mark.parametrize("spec_path", PARAMS, ids=lambda p: p.stem)
def test_params_spec_configs_are_notebook_parameters(spec_path):
    """Every key a sweep injects is a parameter of its notebook, every strategy is registered, every chunking
    config is valid: a spec that would fail at execution time fails here in a second."""
    from lab.retrievers import available
    from lab.text.chunking import describe_chunking
    from lab.workbench.config import RESERVED_PARAMS, expand, load_spec

    spec = load_spec(spec_path)
    configs = expand(spec)
    names = set(_parameters(spec.notebook))
    assert set(RESERVED_PARAMS) <= names
    for config in configs:
        unknown = set(config) - names
        assert not unknown, f"{spec_path.name}: {unknown} are not parameters of {spec.notebook.name}"
        if "strategy" in config:
            assert config["strategy"] in available(), f"{spec_path.name}: strategy {config['strategy']!r}"
        if config.get("chunking"):
            describe_chunking(**config["chunking"])
        assert (ROOT / config["dataset"]).is_dir()


def test_demo_is_wired_into_the_cli():
    from lab.cli.main import build_parser

    args = build_parser().parse_args(["demo", "--spec", "params/smoke.yaml", "--out", "x"])
    assert args.func.__module__ == "lab.cli.demo" and args.spec == "params/smoke.yaml"


# ------------------------------------------------------------------------------------------------ executions
@pytest.fixture(scope="module")
def kernel():
    import sys

    from jupyter_client.kernelspec import KernelSpecManager

    specs = KernelSpecManager().find_kernel_specs()
    if KERNEL not in specs:
        pytest.fail(f"Jupyter kernel {KERNEL!r} is not installed (found {sorted(specs)}); run `make setup`")
    argv = KernelSpecManager().get_kernel_spec(KERNEL).argv
    assert Path(argv[0]).resolve() == Path(sys.executable).resolve() or argv[0] == sys.executable, \
        f"kernel {KERNEL!r} runs {argv[0]}, not this interpreter {sys.executable}; rerun `make setup`"
    return KERNEL


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A temporary MLflow store and embedding cache for the module (kernels inherit LAB_CACHE_DIR)."""
    base = tmp_path_factory.mktemp("nbstore")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LAB_CACHE_DIR", str(base / "cache"))
        mp.setenv("LAB_NO_PROGRESS", "1")
        for k, v in {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "MLFLOW_DISABLE_TELEMETRY": "true"}.items():
            mp.setenv(k, v)
        yield base / "mlruns"


@pytest.fixture(scope="module")
def scifact_slice(tmp_path_factory):
    """Real SciFact, sliced: the first 10 test queries (by id, as max_queries picks them), their qrels and
    evidence spans, their cited documents and the first 40 documents of the corpus, in BEIR layout."""
    src = ROOT / "data" / "scifact"
    out = tmp_path_factory.mktemp("data") / "scifact-slice"
    (out / "qrels").mkdir(parents=True)
    rows = [line.split("\t") for line in (src / "qrels" / "test.tsv").read_text().splitlines()[1:]]
    qids = sorted({r[0] for r in rows})[:10]
    rows = [r for r in rows if r[0] in qids]
    cited = {r[1] for r in rows}
    with gzip.open(src / "corpus.jsonl.gz", "rt", encoding="utf-8") as f:
        docs = [json.loads(line) for line in f]
    keep = [d for i, d in enumerate(docs) if i < 40 or str(d["_id"]) in cited]
    (out / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in keep), encoding="utf-8")
    queries = [json.loads(line) for line in (src / "queries.jsonl").read_text(encoding="utf-8").splitlines()]
    (out / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries if q["_id"] in qids),
                                       encoding="utf-8")
    (out / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join("\t".join(r) + "\n" for r in rows))
    ev = [line for line in (src / "evidence.jsonl").read_text(encoding="utf-8").splitlines()
          if json.loads(line)["query_id"] in qids and json.loads(line).get("split", "test") == "test"]
    assert ev, "the slice needs evidence spans"
    (out / "evidence.jsonl").write_text("".join(line + "\n" for line in ev), encoding="utf-8")
    return out


def execute(name: str, out_dir: Path, kernel: str, store: Path, **parameters) -> nbformat.NotebookNode:
    """Execute notebooks/<name> with Papermill (cwd = notebooks/, as JupyterLab runs it); returns the result."""
    import papermill as pm

    out = out_dir / name
    pm.execute_notebook(str(NOTEBOOK_DIR / name), str(out), kernel_name=kernel, cwd=str(NOTEBOOK_DIR),
                        parameters={"tracking_root": str(store), "progress": False, **parameters},
                        progress_bar=False, start_timeout=180)
    return nbformat.read(out, as_version=4)


def runs_of(store: Path, experiment: str) -> list:
    from lab.tracking.store import client

    cl = client(store)
    exp = cl.get_experiment_by_name(experiment)
    assert exp is not None, f"no experiment {experiment!r} logged"
    return sorted(cl.search_runs([exp.experiment_id]), key=lambda r: r.info.start_time)


def artifacts(store: Path, run_id: str, path: str | None = None) -> set[str]:
    from lab.tracking.store import client

    return {a.path for a in client(store).list_artifacts(run_id, path)}


def outputs(nb, mime: str) -> list:
    return [o.data[mime] for c in nb.cells if c.cell_type == "code" for o in c.outputs
            if o.output_type in ("display_data", "execute_result") and mime in o.get("data", {})]


def test_01_testset_stats_on_ord_qa(tmp_path, kernel, store):
    nb = execute("01_testset_generation.ipynb", tmp_path, kernel, store, dataset="data/ord-qa", experiment="t01")
    (run,) = runs_of(store, "t01")
    m = run.data.metrics
    assert run.info.status == "FINISHED"
    assert m["queries"] == 90 and m["qrels"] == 161 and m["documents"] == 290  # ORD-QA SOURCE.md counts
    assert m["qrels_per_query_max"] == 7 and m["evidence_spans"] == 0
    assert run.data.tags["dataset"] == "ord-qa" and run.data.tags["dataset_fingerprint"]
    assert {"figures/qrels_per_query.png", "figures/grades.png", "figures/query_length.png"} <= \
        artifacts(store, run.info.run_id, "figures")
    assert len(outputs(nb, "image/png")) == 3


def test_01_logs_source_links_a_faq_log(tmp_path, kernel, store):
    """source='logs': the FAQ fixture is linked to ORD-QA units (FAQ import), the set is written and described."""
    nb = execute("01_testset_generation.ipynb", tmp_path, kernel, store, dataset="data/ord-qa", experiment="t01l",
                 source="logs", logs=str(ROOT / "tests" / "fixtures" / "testset" / "openroad_faq.csv"),
                 out=str(tmp_path / "faq-set"))
    (run,) = runs_of(store, "t01l")
    m = run.data.metrics
    assert run.info.status == "FINISHED" and run.data.params["source"] == "logs"
    assert m["logs_rows"] == 20 and m["logs_linked"] + m["logs_unlinked"] + m["logs_duplicates"] == 20
    assert m["queries"] == m["logs_linked"] > 0 and m["documents"] == 290
    assert (tmp_path / "faq-set" / "unlinked.jsonl").is_file()
    assert (tmp_path / "faq-set" / "qrels" / "test.tsv").is_file()
    assert len(outputs(nb, "image/png")) == 3


def test_01_llm_source_generates_with_gates(tmp_path, kernel, store):
    """source='llm': real SmolLM2 generation on a 3-passage slice of ORD-QA; the gate funnel is drawn and logged
    and every candidate is accounted for (accepted, or dropped at exactly one gate)."""
    from builders import mini_dataset

    folder = mini_dataset(tmp_path)
    nb = execute("01_testset_generation.ipynb", tmp_path, kernel, store, dataset=str(folder), experiment="t01g",
                 source="llm", n=1, out=str(tmp_path / "gen"), concurrency=1)
    (run,) = runs_of(store, "t01g")
    m = run.data.metrics
    assert run.info.status == "FINISHED" and run.data.params["source"] == "llm" and run.data.params["n"] == "1"
    assert m["gen_accepted"] == m["queries"] == 1 and m["documents"] == 3
    dropped = sum(v for k, v in m.items() if k.startswith("gen_gate_") and k.endswith("_dropped"))
    assert m["gen_candidates"] == m["gen_accepted"] + dropped
    assert "figures/gate_funnel.png" in artifacts(store, run.info.run_id, "figures")
    prov = json.loads((tmp_path / "gen" / "provenance.json").read_text(encoding="utf-8"))
    assert prov["llm"]["identity"].startswith("gguf:SmolLM2-135M-Instruct") and prov["seed"] == 0
    assert m["evidence_spans"] == 1  # the generated question's evidence span, drawn as a fifth figure
    assert len(outputs(nb, "image/png")) == 5


def _docs_folder(root: Path) -> Path:
    """A tiny folder of real documentation files (three ORD-QA passages, from the OpenROAD docs) in three formats."""
    src = {json.loads(ln)["_id"]: json.loads(ln)["text"]
           for ln in (ROOT / "data" / "ord-qa" / "corpus.jsonl").read_text(encoding="utf-8").splitlines()}
    folder = root / "docs"
    (folder / "guides").mkdir(parents=True)
    (folder / "guides" / "install.md").write_text(src["install_2"], encoding="utf-8")
    (folder / "restructure.txt").write_text(src["restructure_0"], encoding="utf-8")
    body = "".join(f"<p>{p}</p>" for p in src["antenna_rule_checker_0"].split("\n\n"))
    (folder / "antenna.html").write_text(f"<html><head><title>Antenna checker</title></head><body><nav>Home | Docs"
                                         f"</nav>{body}<footer>(c) OpenROAD</footer></body></html>", encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def folder_set(tmp_path_factory, kernel, store):
    """Notebook 01 with source='folder' on the tiny folder: ingest, generate one question with SmolLM2."""
    tmp = tmp_path_factory.mktemp("folder")
    nb = execute("01_testset_generation.ipynb", tmp, kernel, store, dataset="data/ord-qa", experiment="t01f",
                 source="folder", folder=str(_docs_folder(tmp)), ingest_out=str(tmp / "ingested"), n=1,
                 out=str(tmp / "gen"), concurrency=1)
    return nb, tmp / "ingested", tmp / "gen"


def test_01_folder_source_ingests_then_generates_with_evidence(folder_set, store):
    """source='folder': three files (md, txt, html) ingested, one generated question with its evidence span."""
    from lab.data.beir import load_dataset

    nb, ingested, gen = folder_set
    (run,) = runs_of(store, "t01f")
    m = run.data.metrics
    assert run.info.status == "FINISHED" and run.data.params["source"] == "folder"
    assert m["ingest_documents"] == 3 and m["ingest_skipped"] == 0 and m["documents"] == 3
    assert m["gen_accepted"] == m["queries"] == 1 and m["evidence_spans"] == 1
    assert sorted(json.loads(ln)["_id"] for ln in (ingested / "corpus.jsonl").read_text().splitlines()) == [
        "antenna", "guides/install", "restructure"]
    ds = load_dataset(gen, progress=False)
    (span,) = ds.evidence
    meta = ds.queries.metadata[span.query_id]
    ps, pe = meta["passage_span"]
    assert ds.corpus[span.doc_id].text[ps:pe] == meta["passage"] and ps <= span.start < span.end <= pe
    assert {"figures/gate_funnel.png", "figures/evidence_span_length.png"} <= artifacts(store, run.info.run_id,
                                                                                        "figures")


def test_02_span_relevance_on_a_generated_set(tmp_path, kernel, store, folder_set):
    """Notebook 02's default span relevance works on a generated set: chunks scored by overlap with its spans."""
    _, _, gen = folder_set
    execute("02_chunk_size_grid.ipynb", tmp_path, kernel, store, dataset=str(gen), experiment="t02g",
            chunkers=["recursive"], chunk_sizes=[64], overlaps=[0])
    (run,) = runs_of(store, "t02g")
    assert run.info.status == "FINISHED" and run.data.tags["relevance_mode"] == "span"
    assert run.data.metrics["n_queries"] == 1 and 0.0 <= run.data.metrics["recall_at_10"] <= 1.0


def test_02_chunk_size_grid_span_relevance(tmp_path, kernel, store, scifact_slice):
    nb = execute("02_chunk_size_grid.ipynb", tmp_path, kernel, store, dataset=str(scifact_slice),
                 experiment="t02", chunkers=["recursive"], chunk_sizes=[64, 256], overlaps=[0])
    runs = runs_of(store, "t02")
    assert [r.data.params["chunking.size"] for r in runs] == ["64", "256"]
    assert all(r.info.status == "FINISHED" and r.data.tags["relevance_mode"] == "span" for r in runs)
    for r in runs:
        m = r.data.metrics
        assert 0 < m["n_queries"] <= 10 and 0.0 <= m["recall_at_10"] <= 1.0
        assert m["ndcg_at_10_ci_low"] <= m["ndcg_at_10"] <= m["ndcg_at_10_ci_high"]
        assert "figures/metrics_vs_chunk_size.png" in artifacts(store, r.info.run_id, "figures")
        # token-level chunk metrics beside the ranking ones (span relevance), and their plot
        assert 0.0 <= m["token_iou_at_10"] <= min(m["token_recall_at_10"], m["token_precision_at_10"]) <= 1.0
        assert "judged_at_10" in m
        assert "figures/token_metrics_vs_chunk_size.png" in artifacts(store, r.info.run_id, "figures")
    # smaller chunks: more units indexed (read back from the logged result)
    units = [json.loads(_artifact_text(store, r.info.run_id, "result.json"))["info"]["n_units"] for r in runs]
    n_docs = sum(1 for _ in open(scifact_slice / "corpus.jsonl"))
    assert units[0] > units[1] >= n_docs
    assert len(outputs(nb, "image/png")) == 3


def test_02_small_to_big_rows_beside_plain_chunks(tmp_path, kernel, store, scifact_slice):
    """Notebook 02 with parent_sizes: the plain chunk size, then parent and window rows over the same chunks."""
    execute("02_chunk_size_grid.ipynb", tmp_path, kernel, store, dataset=str(scifact_slice), experiment="t02s",
            chunkers=["recursive"], chunk_sizes=[256], overlaps=[0], parent_sizes=[256])
    runs = runs_of(store, "t02s")
    assert [r.data.params["strategy"] for r in runs] == ["bm25", "parent", "parent"]
    assert [r.data.params.get("params.mode") for r in runs] == [None, "parent", "window"]
    assert all(r.info.status == "FINISHED" and r.data.params["chunking.size"] == "256" for r in runs)


def _artifact_text(store: Path, run_id: str, path: str) -> str:
    from mlflow.artifacts import download_artifacts

    from lab.tracking.store import tracking_uri

    return Path(download_artifacts(run_id=run_id, artifact_path=path, tracking_uri=tracking_uri(store))).read_text()


def test_03_strategy_comparison_interactive(tmp_path, kernel, store):
    nb = execute("03_strategy_comparison.ipynb", tmp_path, kernel, store, dataset="data/ord-qa", experiment="t03",
                 strategies=["bm25", "dense"], max_queries=5)
    runs = runs_of(store, "t03")
    assert [r.data.params["strategy"] for r in runs] == ["bm25", "dense"]
    for r in runs:
        assert r.info.status == "FINISHED" and r.data.metrics["n_queries"] == 5
        assert {"ndcg_at_10", "ndcg_at_10_ci_low", "ndcg_at_10_ci_high", "latency_p50_ms"} <= set(r.data.metrics)
        assert {"figures/leaderboard.png", "figures/quality_vs_latency.png", "figures/per_query.png"} <= \
            artifacts(store, r.info.run_id, "figures")
    assert any("MiniLM" in v for k, v in runs[1].data.tags.items() if k.startswith("model.")), runs[1].data.tags
    board = "\n".join(outputs(nb, "text/plain"))
    assert "significant" in board and "bm25" in board and "dense" in board
    assert "jaccard@10" in board and "rbo" in board  # the overlap of the two rankings, without labels
    printed = "".join(o.text for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "stream")
    assert "trust: 5 queries; labels human" in printed  # the trust lines above the plots
    assert all(r.data.tags["labels.source"] == "human" for r in runs)
    pngs = outputs(nb, "image/png")
    assert len(pngs) == 3


def test_04_embedding_comparison_on_chunks(tmp_path, kernel, store, scifact_slice):
    from builders import TINY_EMBEDDER, write_tiny_dataset

    train_data = write_tiny_dataset(tmp_path / "train-data")
    finetuned = {"MiniLM tiny fine-tune": {"train_dataset": str(train_data), "out": str(tmp_path / "models" / "ft"),
                                           "tracking_root": str(store), "train": TINY_EMBEDDER}}
    nb = execute("04_embedding_comparison.ipynb", tmp_path, kernel, store, dataset=str(scifact_slice),
                 experiment="t04", models=["all-MiniLM-L6-v2"], finetuned=finetuned, max_queries=5)
    base, ft = sorted(runs_of(store, "t04"), key=lambda r: r.data.tags.get("strategy", ""))
    m = base.data.metrics
    assert base.info.status == "FINISHED" and base.data.params["params.model"] == "all-MiniLM-L6-v2"
    assert m["index_seconds"] > 0 and m["n_queries"] == 5 and base.data.tags["relevance_mode"] == "doc"
    assert base.data.params["chunking.size"] == "256"  # the notebook's default chunking
    assert {"figures/leaderboard.png", "figures/quality_vs_encode_time.png"} <= \
        artifacts(store, base.info.run_id, "figures")
    assert ft.data.tags["strategy"] == "dense_ft" and ft.data.params["retriever.trained.content_key"]
    assert (tmp_path / "models" / "ft" / "training.json").is_file()
    text = "\n".join(outputs(nb, "text/plain")) + "\n".join(outputs(nb, "text/html"))
    assert "p_value" in text and "MiniLM tiny fine-tune" in text  # the paired test against the base model
    assert len(outputs(nb, "image/png")) == 3


def test_demo_runs_the_smoke_sweep_and_resumes(tmp_path, store, kernel):
    from lab.workbench.demo import run_demo

    lines: list[str] = []
    res = run_demo("params/smoke.yaml", tracking_root=store, out_dir=tmp_path / "demo", progress=False,
                   echo=lines.append)
    text = "\n".join(lines)
    assert res.ok, text
    df = res.leaderboard
    assert sorted(df["label"]) == ["strategy=bm25", "strategy=dense"]
    assert df["ndcg@10"].between(0, 1).all() and (df["ndcg@10_ci_low"] <= df["ndcg@10"]).all()
    assert df.loc[0, "diff"] == 0.0 and not df["significant"].iloc[0]
    png = (tmp_path / "demo" / "leaderboard.png").read_bytes()
    assert png.startswith(PNG_MAGIC)
    assert "ndcg@10" in text and "mlflow ui" in text and "--workers 1" in text and "127.0.0.1" in text
    assert "trust: " in text and "labels human" in text  # the trust lines above the table
    # the table names the rows by the charts' short labels (lab.analysis.labels), not "strategy=..."
    rows = [line.split()[1] for line in text.splitlines() if re.match(r"^\s*\d+\s+\S+\s+0\.\d{4}\s", line)]
    assert sorted(rows) == ["bm25", "dense"], text
    assert df.attrs["trust"]["labels"]["source"] == "human"
    # each sweep run was executed by notebook 03 in sweep mode: it logged into the run the sweep created
    for run_id in df["run_id"]:
        assert "figures/leaderboard.png" in artifacts(store, run_id, "figures")
        assert any(p.startswith("notebook/") for p in artifacts(store, run_id, "notebook"))
    # a second demo only reads: every config is skipped, same leaderboard
    again = run_demo("params/smoke.yaml", tracking_root=store, out_dir=tmp_path / "demo", progress=False,
                     echo=lambda *a: None)
    assert again.report.n_skipped == 2 and list(again.leaderboard["run_id"]) == list(df["run_id"])
