"""Publish headline metrics for monitoring: Prometheus text exposition, as a file or pushed to a Pushgateway.

A scheduled sweep (or ``lab compare``) turns the finished runs of an MLflow experiment into gauges, so a Grafana
panel can watch Recall@k or MRR of each strategy over time.

Series (all gauges; one per run and metric, labels below; the text format 0.0.4 that the node exporter's
textfile collector and the Pushgateway read):

- ``raglab_retrieval_metric{experiment, dataset, split, strategy, config, metric, metrics_version}``: the mean of
  one metric over the run's queries; ``metric`` is our name as is (``ndcg@10``, ``recall@100``), so names need
  no mapping and one PromQL selector picks any of them.
- ``raglab_retrieval_metric_ci_low`` / ``raglab_retrieval_metric_ci_high``: the bootstrap CI bounds as logged.
- ``raglab_retrieval_latency_seconds{..., percentile="50"|"95"|"99"}``: per-query latency percentiles (base unit
  seconds, as Prometheus asks; our runs log milliseconds), without the ``metric`` label. The label is not
  ``quantile``: that one is reserved for summaries, and these are gauges read from MLflow.
- ``raglab_retrieval_queries``: queries evaluated. ``raglab_retrieval_run_end_timestamp_seconds``: when the
  MLflow run ended (what a panel shows as "last evaluated").
- ``raglab_publish_timestamp_seconds{experiment}``: when this exposition was made.

``config`` is the run's leaderboard label (the params that differ between the experiment's runs, see
:mod:`lab.analysis.compare`), so two configs of one strategy (chunk sizes, k1) are two series. When several finished
runs share every label (a rerun), the latest one is published: Prometheus refuses duplicate series.

Names follow the Prometheus rules (``[a-zA-Z_:][a-zA-Z0-9_:]*``, label names ``[a-zA-Z_][a-zA-Z0-9_]*``); label
values escape backslash, double quote and newline; HELP text escapes backslash and newline. Samples carry no
timestamp by default: the textfile collector refuses them and the Pushgateway rejects pushes with them; pass
``timestamp_ms`` only for a scraper that accepts them.

Files are written atomically (a temporary file in the same folder, fsync, then rename, mode 0644) so the
textfile collector never reads half a file; the temporary name does not end in ``.prom``, so the collector
ignores it. A push is an HTTP PUT (replace the group; POST: replace only the pushed metric names) of the text to
``<url>/metrics/job/<job>[/<label>/<value>...]``; label values that are empty or hold "/" are sent base64url
encoded (``<label>@base64/<value>``) as the Pushgateway documents.
"""
from __future__ import annotations

import base64
import math
import re
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping
from urllib.parse import quote

from lab.analysis.compare import experiment_runs, run_labels
from lab.core.atomic import write_text_atomic
from lab.core.errors import ConfigError, LabError
from lab.retrievers.http import public_url, redact, resolve_headers
from lab.tracking.store import client, mlflow_metric_name

#: Metrics published by default (our names).
DEFAULT_METRICS = ("ndcg@10", "recall@10", "recall@100", "mrr@10")
PREFIX = "raglab"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")

HELP = {
    "raglab_retrieval_metric": "Mean of a retrieval metric over the queries of an evaluated run (raglab metric "
                               "conventions of the metrics_version label).",
    "raglab_retrieval_metric_ci_low": "Lower bound of the 95% percentile-bootstrap CI of the metric mean.",
    "raglab_retrieval_metric_ci_high": "Upper bound of the 95% percentile-bootstrap CI of the metric mean.",
    "raglab_retrieval_latency_seconds": "Per-query retrieval latency percentile of the run, in seconds.",
    "raglab_retrieval_queries": "Number of queries the run was evaluated on.",
    "raglab_retrieval_run_end_timestamp_seconds": "Unix time at which the evaluated MLflow run ended.",
    "raglab_publish_timestamp_seconds": "Unix time at which raglab wrote these metrics.",
}


class PublishError(LabError):
    """Writing the file or pushing to the Pushgateway failed."""


@dataclass(frozen=True)
class Sample:
    """One gauge sample: family name, labels (in order) and value."""

    name: str
    labels: tuple[tuple[str, str], ...]
    value: float
    help: str = ""
    kind: str = "gauge"


# ------------------------------------------------------------------------------------------------ format
def sanitize_name(name: str, label: bool = False) -> str:
    """A valid metric name (or label name): characters outside ``[a-zA-Z0-9_]`` (":" too for labels) become
    "_", "@" becomes "_at_", a leading digit gets a "_" prefix: ``"ndcg@10"`` -> ``"ndcg_at_10"``."""
    s = re.sub(r"[^a-zA-Z0-9_:]" if not label else r"[^a-zA-Z0-9_]", "_", str(name).replace("@", "_at_"))
    if not s or s[0].isdigit():
        s = "_" + s
    return s


def escape_label_value(value: str) -> str:
    """Label value escaping of the text format: ``\\`` -> ``\\\\``, ``"`` -> ``\\"``, newline -> ``\\n``."""
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def escape_help(text: str) -> str:
    """HELP text escaping: ``\\`` -> ``\\\\``, newline -> ``\\n``."""
    return str(text).replace("\\", "\\\\").replace("\n", "\\n")


def format_value(value: float) -> str:
    """A sample value as the text format writes it: repr of the float, NaN / +Inf / -Inf spelled out."""
    v = float(value)
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(v)


def exposition(samples: Iterable[Sample], timestamp_ms: int | None = None) -> str:
    """Prometheus text exposition (format 0.0.4) of ``samples``: families in first-seen order, each with one
    ``# HELP`` and one ``# TYPE`` line, then its samples. Raises ConfigError for an invalid metric or label name
    and for two samples with the same name and labels (Prometheus would reject the scrape)."""
    families: dict[str, list[Sample]] = {}
    for s in samples:
        if not _METRIC_NAME.match(s.name):
            raise ConfigError(f"metric name {s.name!r} is not valid in Prometheus; use sanitize_name()")
        for key, _ in s.labels:
            if not _LABEL_NAME.match(key) or key.startswith("__"):
                raise ConfigError(f"label name {key!r} of {s.name} is not valid in Prometheus")
        families.setdefault(s.name, []).append(s)
    lines: list[str] = []
    for name, group in families.items():
        first = group[0]
        lines.append(f"# HELP {name} {escape_help(first.help or HELP.get(name, name))}")
        lines.append(f"# TYPE {name} {first.kind}")
        seen = set()
        for s in group:
            if s.labels in seen:
                raise ConfigError(f"two samples of {name} with the same labels {dict(s.labels)}")
            seen.add(s.labels)
            labels = ",".join(f'{k}="{escape_label_value(v)}"' for k, v in s.labels)
            line = f"{name}{{{labels}}} {format_value(s.value)}" if labels else f"{name} {format_value(s.value)}"
            if timestamp_ms is not None:
                line += f" {int(timestamp_ms)}"
            lines.append(line)
    return "\n".join(lines) + "\n" if lines else ""


# ------------------------------------------------------------------------------------------------ from MLflow
def experiment_samples(experiment: str, metrics: Iterable[str] = DEFAULT_METRICS, tracking_root="mlruns",
                       run_ids: Iterable[str] | None = None, parent_run_id: str | None = None,
                       now: float | None = None) -> list[Sample]:
    """The samples of an experiment's finished runs (sweep parents excluded; only ``run_ids`` / the children of
    ``parent_run_id`` when given), for the ``metrics`` each run logged (see the module docstring). A metric no
    run logged is skipped; an experiment that does not exist is a ConfigError."""
    cl = client(tracking_root)
    exp = cl.get_experiment_by_name(experiment)
    if exp is None:
        names = ", ".join(sorted(e.name for e in cl.search_experiments())) or "none"
        raise ConfigError(f"no experiment {experiment!r} in the store at {tracking_root}; experiments: {names}")
    keep = None if run_ids is None else set(run_ids)
    runs = [r for r in experiment_runs(cl, exp.experiment_id, parent_run_id) if keep is None or r.info.run_id in keep]
    metrics = list(metrics)
    latest: dict[tuple, tuple[int, object, str]] = {}
    for r, label in zip(runs, run_labels(runs) if runs else [], strict=True):
        t, p = r.data.tags, r.data.params
        base = (("experiment", experiment), ("dataset", t.get("dataset", p.get("dataset", ""))),
                ("split", t.get("split", p.get("split", ""))),
                ("strategy", p.get("strategy", t.get("strategy", ""))), ("config", label),
                ("metrics_version", t.get("metrics_version", "")))
        when = r.info.end_time or r.info.start_time or 0
        if base not in latest or when >= latest[base][0]:
            latest[base] = (when, r, label)
    out: list[Sample] = []
    for base, (when, r, _) in latest.items():
        m = r.data.metrics
        head, tail = base[:5], base[5:]
        for metric in metrics:
            key = mlflow_metric_name(metric)
            if key not in m:
                continue
            labels = (*head, ("metric", metric), *tail)
            out.append(Sample("raglab_retrieval_metric", labels, m[key]))
            for bound in ("ci_low", "ci_high"):
                bkey = mlflow_metric_name(f"{metric}_{bound}")
                if bkey in m:
                    out.append(Sample(f"raglab_retrieval_metric_{bound}", labels, m[bkey]))
        for q in ("50", "95", "99"):
            v = m.get(f"latency_p{q}_ms")
            if v is not None and not math.isnan(v):
                out.append(Sample("raglab_retrieval_latency_seconds", (*base, ("percentile", q)), v / 1000.0))
        if "n_queries" in m:
            out.append(Sample("raglab_retrieval_queries", base, m["n_queries"]))
        if when:
            out.append(Sample("raglab_retrieval_run_end_timestamp_seconds", base, when / 1000.0))
    out.append(Sample("raglab_publish_timestamp_seconds", (("experiment", experiment),),
                      time.time() if now is None else now))
    order = {name: i for i, name in enumerate(HELP)}
    return sorted(out, key=lambda s: order.get(s.name, len(order)))  # stable: families grouped, runs in order


# ------------------------------------------------------------------------------------------------ outputs
def _check_ours(path: Path) -> None:
    """Refuse to overwrite a file raglab did not write: an existing file must hold only what raglab writes there,
    ``#`` lines and ``raglab_*`` samples (an empty file too)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(65536).decode("utf-8", errors="replace")
    except FileNotFoundError:
        return
    except OSError as exc:
        raise PublishError(f"{path}: cannot read the file already there ({exc.strerror or exc})") from None
    if all(not ln.strip() or ln.startswith(("#", "raglab_")) for ln in head.splitlines()):
        return
    raise PublishError(f"{path}: a file raglab did not write is there (not Prometheus text of raglab_* metrics); "
                       "not overwritten: move it away, or publish to another path")


def write_textfile(text: str, path: str | Path) -> Path:
    """Write ``text`` to ``path`` atomically (temp file in the same folder, fsync, rename; mode 0644); returns
    the path. A file raglab did not write is never overwritten (PublishError; see :func:`_check_ours`).
    The node exporter's textfile collector reads ``*.prom`` files: name it accordingly."""
    path = Path(path)
    _check_ours(path)
    try:
        write_text_atomic(path, text)
    except OSError as exc:
        raise PublishError(f"{path}: cannot write the metrics file ({exc.strerror or exc}); check the folder "
                           "exists and is writable (the node exporter's --collector.textfile.directory)") from None
    return path


def pushgateway_url(url: str, job: str, grouping: Mapping[str, str] | None = None) -> str:
    """``<url>/metrics/job/<job>[/<label>/<value>...]``; values that are empty or hold "/" as
    ``<label>@base64/<base64url value>`` (the Pushgateway's rule)."""
    public_url(url)  # refuses credentials in the URL and non-http schemes
    parts = [url.rstrip("/"), "metrics"]
    for key, value in (("job", job), *(grouping or {}).items()):
        if not _LABEL_NAME.match(str(key)):
            raise ConfigError(f"grouping label {key!r} is not a valid Prometheus label name")
        value = str(value)
        if value == "" or "/" in value:
            parts += [f"{key}@base64", base64.urlsafe_b64encode(value.encode()).decode() or "="]
        else:
            parts += [str(key), quote(value, safe="")]
    return "/".join(parts)


def push(text: str, url: str, job: str = "raglab", grouping: Mapping[str, str] | None = None, method: str = "PUT",
         headers_env: Mapping[str, str] | None = None, timeout: float = 10.0) -> str:
    """Push the exposition ``text`` to a Pushgateway; returns the URL pushed to. ``headers_env``: headers from
    environment variables (as for the http strategy; values never shown). Raises PublishError naming the URL,
    the status and the answer when the Pushgateway refuses or cannot be reached."""
    if method not in ("PUT", "POST"):
        raise ConfigError(f"push method {method!r}: PUT replaces the group's metrics, POST only those pushed")
    target = pushgateway_url(url, job, grouping)
    headers = resolve_headers(headers_env)
    req = urllib.request.Request(target, data=text.encode("utf-8"), method=method,
                                 headers={"Content-Type": CONTENT_TYPE, **headers})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            resp.read()
    except urllib.error.HTTPError as exc:
        body = exc.read().decode("utf-8", errors="replace")[:300]
        raise PublishError(redact(f"push to {target} failed: HTTP {exc.code}: {body}", headers.values())) from None
    except (urllib.error.URLError, OSError) as exc:
        raise PublishError(redact(f"push to {target} failed: {getattr(exc, 'reason', exc)}; is the Pushgateway "
                                  "running there?", headers.values())) from None
    return target


def publish(experiment: str, *, prometheus: str | Path | None = None, pushgateway: str | None = None,
            job: str = "raglab", metrics: Iterable[str] = DEFAULT_METRICS, tracking_root="mlruns",
            run_ids: Iterable[str] | None = None, parent_run_id: str | None = None,
            headers_env: Mapping[str, str] | None = None, extra_samples: Iterable[Sample] = ()) -> list[str]:
    """Publish the experiment's runs (see :func:`experiment_samples`) to a textfile and/or a Pushgateway (grouped
    by ``experiment``); returns what was written (paths and URLs). ``extra_samples`` are added (a scheduled
    sweep's comparison with the previous one, see lab.workbench.schedule). Nothing asked: ConfigError."""
    if not prometheus and not pushgateway:
        raise ConfigError("publish: give a file (--prometheus FILE) or a Pushgateway URL (--pushgateway URL)")
    text = exposition([*experiment_samples(experiment, metrics, tracking_root, run_ids=run_ids,
                                           parent_run_id=parent_run_id),
                       *extra_samples])
    done = []
    if prometheus:
        done.append(str(write_textfile(text, prometheus)))
    if pushgateway:
        done.append(push(text, pushgateway, job=job, grouping={"experiment": experiment}, headers_env=headers_env))
    return done


def parse_publish(raw, where: str = "publish") -> dict:
    """Validate a ``publish`` mapping (sweep YAML key or CLI): ``prometheus`` (file), ``pushgateway`` (URL),
    ``job`` (default raglab), ``metrics`` (list, default :data:`DEFAULT_METRICS`), ``headers_env`` (mapping).
    Returns a normalised dict; errors name ``where`` and the key."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: expected a mapping with prometheus: FILE and/or pushgateway: URL, got {raw!r}")
    allowed = ("prometheus", "pushgateway", "job", "metrics", "headers_env")
    for key in raw:
        if key not in allowed:
            raise ConfigError(f"{where}.{key}: unknown key; allowed: {', '.join(allowed)}")
    out = {k: raw[k] for k in allowed if raw.get(k) is not None}
    if not out.get("prometheus") and not out.get("pushgateway"):
        raise ConfigError(f"{where}: give prometheus: FILE (node exporter textfile) and/or pushgateway: URL")
    for key in ("prometheus", "pushgateway", "job"):
        if key in out and (not isinstance(out[key], str) or not out[key].strip()):
            raise ConfigError(f"{where}.{key}: must be a non-empty string, got {out[key]!r}")
    if "pushgateway" in out:
        pushgateway_url(out["pushgateway"], out.get("job", "raglab"))
    metrics = out.get("metrics", list(DEFAULT_METRICS))
    if isinstance(metrics, str):
        metrics = [metrics]
    if not isinstance(metrics, list) or not metrics or not all(isinstance(m, str) for m in metrics):
        raise ConfigError(f"{where}.metrics: a list of metric names, e.g. [ndcg@10, recall@100], got {metrics!r}")
    out["metrics"] = metrics
    if "headers_env" in out and not isinstance(out["headers_env"], Mapping):
        raise ConfigError(f"{where}.headers_env: a mapping header -> environment variable name")
    return out
