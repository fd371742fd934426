"""lab.workbench.monitoring: Prometheus text exposition of real runs (BM25 on ORD-QA logged into a tmp MLflow store),
validated by prometheus_client's parser and, when it is on PATH, by `promtool check metrics`; the atomic
textfile; a push to a local aiohttp server standing in for the Pushgateway; a sweep's `publish` key."""
from __future__ import annotations

import os
import shutil
import subprocess
import threading

import pytest
from conftest import blank_store

import lab
from lab.core.errors import ConfigError
from lab.core.paths import resolve_repo_path
from lab.workbench.monitoring import (
    PublishError,
    Sample,
    escape_label_value,
    experiment_samples,
    exposition,
    publish,
    push,
    pushgateway_url,
    sanitize_name,
    write_textfile,
)

SECRET = "pgw-SECRET-77aa0b1c2d"


def parse(text: str) -> dict:
    """{(name, frozenset(labels)): value} by prometheus_client's parser (raises on invalid text)."""
    from prometheus_client.parser import text_string_to_metric_families

    out = {}
    for fam in text_string_to_metric_families(text):
        assert fam.type == "gauge" and fam.documentation
        for s in fam.samples:
            key = (s.name, frozenset(s.labels.items()))
            assert key not in out
            out[key] = s.value
    return out


def promtool(text: str, record=None) -> str:
    """`promtool check metrics` on text when promtool is on PATH (asserting it passes); says which validator ran."""
    exe = shutil.which("promtool")
    if exe is None:
        return "prometheus_client parser only"
    proc = subprocess.run([exe, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return "promtool check metrics + prometheus_client parser"


# ------------------------------------------------------------------------------------------------ format
def test_names_and_escaping():
    assert sanitize_name("ndcg@10") == "ndcg_at_10" and sanitize_name("10x-y.z") == "_10x_y_z"
    assert escape_label_value('a"b\\c\nd') == 'a\\"b\\\\c\\nd'
    nasty = 'chunk "size"=256\\512\nnext'
    text = exposition([Sample("raglab_x", (("config", nasty), ("metric", "ndcg@10")), 0.5, help="x\\y\nz"),
                       Sample("raglab_x", (("config", "plain"), ("metric", "ndcg@10")), float("nan")),
                       Sample("raglab_up", (), 1)])
    assert "# HELP raglab_x x\\\\y\\nz" in text and "# TYPE raglab_x gauge" in text
    values = parse(text)
    assert values[("raglab_x", frozenset({("config", nasty), ("metric", "ndcg@10")}))] == 0.5
    assert values[("raglab_up", frozenset())] == 1
    promtool(text)
    with pytest.raises(ConfigError, match="same labels"):
        exposition([Sample("raglab_x", (("a", "1"),), 1), Sample("raglab_x", (("a", "1"),), 2)])
    with pytest.raises(ConfigError, match="not valid"):
        exposition([Sample("ndcg@10", (), 1)])
    with pytest.raises(ConfigError, match="label name"):
        exposition([Sample("raglab_x", (("bad-label", "1"),), 1)])
    assert exposition([Sample("raglab_x", (), 2)], timestamp_ms=1700000000000).endswith("raglab_x 2.0 1700000000000\n")


def test_textfile_is_replaced_atomically(tmp_path):
    path = tmp_path / "textfile" / "raglab.prom"
    write_textfile("raglab_x 1.0\n", path)
    with open(path, encoding="utf-8") as reader:  # a collector in the middle of reading the old file ...
        write_textfile("raglab_x 2.0\n", path)
        assert reader.read() == "raglab_x 1.0\n"  # ... still reads the whole old file (a new inode replaced it)
    assert path.read_text() == "raglab_x 2.0\n"
    assert oct(path.stat().st_mode & 0o777) == "0o644"
    assert sorted(p.name for p in path.parent.iterdir()) == ["raglab.prom"]  # no temporary file left
    if os.geteuid() != 0:  # root writes anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        with pytest.raises(PublishError, match="cannot write"):
            write_textfile("x 1\n", locked / "m.prom")


# ------------------------------------------------------------------------------------------------ push
class Gateway:
    """A local aiohttp app recording what a Pushgateway would receive; answers 500 for job "broken"."""

    def __init__(self):
        self.requests = []
        self.lock = threading.Lock()

    def app(self):
        from aiohttp import web

        async def handle(request):
            body = await request.text()
            with self.lock:
                self.requests.append({"method": request.method, "path": request.path_qs, "body": body,
                                      "type": request.headers.get("Content-Type"),
                                      "auth": request.headers.get("Authorization")})
            if "/job/broken" in request.path:
                return web.Response(status=500, text=f"storage failed for {request.headers.get('Authorization')}")
            return web.Response(status=200)

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", handle)
        return app


@pytest.fixture(scope="module")
def gateway():
    from lab.experiment.serve import StrategyServer

    g = Gateway()
    with StrategyServer(g.app()) as server:
        g.url = f"http://127.0.0.1:{server.port}"
        yield g


def test_pushgateway_urls():
    assert pushgateway_url("http://pg:9091/", "raglab", {"experiment": "smoke"}) == \
        "http://pg:9091/metrics/job/raglab/experiment/smoke"
    assert pushgateway_url("http://pg:9091", "raglab", {"experiment": "a/b"}) == \
        "http://pg:9091/metrics/job/raglab/experiment@base64/YS9i"
    assert pushgateway_url("http://pg:9091", "raglab", {"experiment": ""}).endswith("/experiment@base64/=")
    with pytest.raises(ConfigError, match="credentials"):
        pushgateway_url("http://u:p@pg:9091", "raglab")


def test_push_sends_the_text_with_headers_from_the_environment(gateway, monkeypatch):
    text = exposition([Sample("raglab_x", (("metric", "ndcg@10"),), 0.25)])
    monkeypatch.setenv("PGW_TOKEN", SECRET)
    url = push(text, gateway.url, job="raglab", grouping={"experiment": "smoke"},
               headers_env={"Authorization": "Bearer $PGW_TOKEN"})
    got = gateway.requests[-1]
    assert url == f"{gateway.url}/metrics/job/raglab/experiment/smoke"
    assert got["method"] == "PUT" and got["path"] == "/metrics/job/raglab/experiment/smoke"
    assert got["body"] == text and got["type"].startswith("text/plain; version=0.0.4")
    assert got["auth"] == f"Bearer {SECRET}"
    with pytest.raises(PublishError, match="HTTP 500") as err:
        push(text, gateway.url, job="broken", headers_env={"Authorization": "Bearer $PGW_TOKEN"})
    assert SECRET not in str(err.value)  # the server echoed the token; the error does not
    with pytest.raises(PublishError, match="is the Pushgateway running"):
        push(text, "http://127.0.0.1:9", job="raglab", timeout=5)


# ------------------------------------------------------------------------------------------------ from MLflow
@pytest.fixture(scope="module")
def logged(tmp_path_factory, pytestconfig):
    """bm25 (k1 0.9 and 1.5) on 20 ORD-QA queries, logged into experiment "mon"."""
    from lab.experiment.run import run_experiment
    from lab.retrievers.base import Context
    from lab.tracking.results import log_result

    root = blank_store(tmp_path_factory.mktemp("mon"), pytestconfig)
    results, ids = {}, {}
    for k1 in (0.9, 1.5):
        results[k1] = run_experiment(resolve_repo_path("data/ord-qa"), "bm25", {"k1": k1}, max_queries=20,
                                     metrics=["ndcg@10", "recall@10", "mrr@10"], ctx=Context(progress=False))
        ids[k1] = log_result(results[k1], experiment="mon", tracking_root=root, n_resamples=100)
    return root, results, ids


def test_experiment_samples_are_the_logged_numbers(logged, tmp_path, gateway, record_property):
    root, results, ids = logged
    samples = experiment_samples("mon", ["ndcg@10", "mrr@10", "recall@1000"], tracking_root=root, now=1.7e9)
    text = exposition(samples)
    values = parse(text)
    validator = promtool(text)
    record_property("validator", validator)
    print(f"validated by: {validator}")
    for k1, res in results.items():
        base = {("experiment", "mon"), ("dataset", "ord-qa"), ("split", "test"), ("strategy", "bm25"),
                ("config", f"params.k1={k1}"), ("metrics_version", lab.METRICS_VERSION)}
        for metric in ("ndcg@10", "mrr@10"):
            key = frozenset(base | {("metric", metric)})
            assert values[("raglab_retrieval_metric", key)] == res.evaluation.means[metric]
            assert values[("raglab_retrieval_metric_ci_low", key)] <= res.evaluation.means[metric]
        assert values[("raglab_retrieval_latency_seconds", frozenset(base | {("percentile", "50")}))] == \
            pytest.approx(res.latency["latency_p50_ms"] / 1000)
        assert values[("raglab_retrieval_queries", frozenset(base))] == 20
    assert not any("recall@1000" in str(k) for k in values)  # a metric no run logged: no series
    assert values[("raglab_publish_timestamp_seconds", frozenset({("experiment", "mon")}))] == 1.7e9

    done = publish("mon", prometheus=tmp_path / "mon.prom", pushgateway=gateway.url, metrics=["ndcg@10"],
                   tracking_root=root,
                   run_ids=[ids[0.9]])
    assert done[0] == str(tmp_path / "mon.prom") and done[1].endswith("/metrics/job/raglab/experiment/mon")
    filed = parse((tmp_path / "mon.prom").read_text())
    assert {dict(k[1])["config"] for k in filed if k[0] == "raglab_retrieval_metric"} == {"bm25 on ord-qa"}
    assert gateway.requests[-1]["body"].startswith("# HELP raglab_retrieval_metric ")
    with pytest.raises(ConfigError, match="no experiment 'nope'"):
        experiment_samples("nope", tracking_root=root)


def test_sweep_publish_key_writes_the_file(logged, tmp_path):
    """A sweep whose configs all finished earlier (resume) still publishes them: what a scheduled sweep does."""
    from lab.core.flat import config_hash
    from lab.experiment.run import run_experiment
    from lab.retrievers.base import Context
    from lab.tracking.results import log_result
    from lab.tracking.store import client, get_or_create_experiment
    from lab.workbench.config import expand, load_spec
    from lab.workbench.sweep import run_sweep

    root = logged[0]
    prom = tmp_path / "textfile" / "sweep.prom"
    spec_path = tmp_path / "mon_sweep.yaml"
    spec_path.write_text(
        f"notebook: {resolve_repo_path('notebooks/03_strategy_comparison.ipynb')}\n"
        f"dataset: {resolve_repo_path('data/ord-qa')}\nexperiment: mon-sweep\n"
        "fixed: {max_queries: 10}\ngrid: {strategy: [bm25]}\n"
        f"publish: {{prometheus: {prom}, metrics: [ndcg@10, recall@10]}}\n")
    spec = load_spec(spec_path)
    assert spec.publish == {"prometheus": str(prom), "metrics": ["ndcg@10", "recall@10"]}
    cl = client(root)
    exp = get_or_create_experiment("mon-sweep", root, cl)
    for config in expand(spec):
        rid = cl.create_run(exp, tags={"config_hash": config_hash(config)}).info.run_id
        res = run_experiment(config["dataset"], config["strategy"], {}, max_queries=10, ctx=Context(progress=False))
        log_result(res, run_id=rid, tracking_root=root, n_resamples=50)
        cl.set_terminated(rid, "FINISHED")
    rep = run_sweep(spec_path, tracking_root=root, output_dir=tmp_path / "nb", progress=False, echo=None)
    assert rep.n_skipped == 1 and rep.published == [str(prom)] and rep.ok
    values = parse(prom.read_text())
    promtool(prom.read_text())
    got = {dict(k[1])["metric"]: v for k, v in values.items() if k[0] == "raglab_retrieval_metric"}
    assert got == {"ndcg@10": pytest.approx(res.evaluation.means["ndcg@10"]),
                   "recall@10": pytest.approx(res.evaluation.means["recall@10"])}

    # CLI options override the spec's keys; an unreachable Pushgateway fails the command (exit 1), not the runs
    from lab.cli.main import main

    other = tmp_path / "cli.prom"
    assert main(["sweep", str(spec_path), "--root", str(root), "--output-dir", str(tmp_path / "nb"),
                 "--no-progress", "--prometheus", str(other)]) == 0
    assert other.is_file() and parse(other.read_text())
    assert main(["sweep", str(spec_path), "--root", str(root), "--output-dir", str(tmp_path / "nb"),
                 "--no-progress", "--pushgateway", "http://127.0.0.1:9"]) == 1


def test_publish_key_is_validated(tmp_path):
    from lab.workbench.config import load_spec

    nb = resolve_repo_path("notebooks/03_strategy_comparison.ipynb")
    for publish_yaml, message in (("{metrics: [ndcg@10]}", "give prometheus"),
                                  ("{prometheus: a.prom, every: 5m}", "publish.every: unknown key"),
                                  ("{pushgateway: 'ftp://x'}", "expected http"),
                                  ("{prometheus: a.prom, metrics: 3}", "publish.metrics")):
        spec = tmp_path / "s.yaml"
        spec.write_text(f"notebook: {nb}\ndataset: data/ord-qa\nfixed: {{strategy: bm25}}\npublish: {publish_yaml}\n")
        with pytest.raises(ConfigError, match=message) as err:
            load_spec(spec)
        assert str(spec) in str(err.value)


def test_compare_publishes_its_metric(logged, tmp_path, capsys):
    from lab.cli.main import main

    root = logged[0]
    out = tmp_path / "cmp.prom"
    assert main(["compare", "--experiment", "mon", "--root", str(root), "--metric", "mrr@10",
                 "--prometheus", str(out)]) == 0
    assert "published to" in capsys.readouterr().out
    metrics = {dict(k[1]).get("metric") for k in parse(out.read_text()) if k[0] == "raglab_retrieval_metric"}
    assert metrics == {"mrr@10"}
    promtool(out.read_text())


@pytest.mark.slow
def test_real_sweep_writes_a_file_promtool_accepts(tmp_path, pytestconfig):
    """End to end: `lab sweep` executes the notebook for two strategies (Papermill, ORD-QA, 10 queries), logs the
    runs and writes the textfile its spec asks for."""
    from lab.cli.main import main

    root = blank_store(tmp_path, pytestconfig)
    prom = tmp_path / "textfile" / "smoke.prom"
    spec_path = tmp_path / "smoke_publish.yaml"
    spec_path.write_text(
        f"notebook: {resolve_repo_path('notebooks/03_strategy_comparison.ipynb')}\n"
        f"dataset: {resolve_repo_path('data/ord-qa')}\nexperiment: smoke-publish\nseed: 0\n"
        "fixed: {max_queries: 10, k: 100, progress: false}\ngrid: {strategy: [bm25, dense]}\n"
        f"publish: {{prometheus: {prom}}}\n")
    assert main(["sweep", str(spec_path), "--root", str(root), "--output-dir", str(tmp_path / "nb"),
                 "--no-progress"]) == 0
    text = prom.read_text()
    values = parse(text)
    promtool(text)
    strategies = {dict(k[1])["strategy"] for k in values if k[0] == "raglab_retrieval_metric"}
    metrics = {dict(k[1])["metric"] for k in values if k[0] == "raglab_retrieval_metric"}
    assert strategies == {"bm25", "dense"} and metrics == {"ndcg@10", "recall@10", "recall@100", "mrr@10"}
    from lab.tracking.store import client

    cl = client(root)
    runs = cl.search_runs([cl.get_experiment_by_name("smoke-publish").experiment_id])
    assert all(r.data.tags.get("metrics_version") == lab.METRICS_VERSION for r in runs)  # children and parent alike
