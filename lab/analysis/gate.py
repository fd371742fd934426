"""The CI regression gate: does the current result hold every gated metric against the baseline?

Conventions
- Inputs (:func:`read_result`), recognised by content, not by name alone:
  * a summary JSON written by ``lab evaluate --json`` or ``lab run --json``: top-level keys that parse as metric
    names (``ndcg@10``) hold the means; ``_meta`` holds metrics_version, n_queries, dataset_fingerprint;
    other keys (latency, ``_ci``) are kept as figures but never gated. A ``result.json`` artifact of an MLflow
    run (``summary`` + ``metrics_version``) reads the same way.
  * a per-query table: ``.csv`` / ``.tsv`` (first column the query id), ``.parquet`` (index = query id) or a
    JSON object ``{query_id: {metric: value}}`` (what ``lab evaluate --per-query`` / ``lab run --per-query``
    write). Means are the column means.
  * a TREC run (``qid Q0 docid rank score tag``): evaluated against ``--qrels`` now (metrics version of this
    code), which gives per-query values.
  * Companion file: a summary JSON ``X.json`` with a per-query table ``X.per_query.{csv,tsv,parquet,json}`` beside
    it gets that table attached (its means must match the summary's to 1e-6, else the input is refused), so a
    committed baseline can carry per-query data for the significance test.
- Drop: ``baseline - current`` (metrics are higher-is-better), positive = worse. Allowed: ``max_drop`` as an
  absolute amount (0.02 = 2 nDCG points) or, with ``relative``, as a fraction of the baseline value. A negative
  ``max_drop`` (as in ``--threshold -0.02``) means the same as its absolute value.
- Significance (both sides per-query): :func:`lab.metrics.paired_test` of current minus baseline on the queries
  both scored; the drop is significant when ``p_permutation < alpha`` and the mean difference is negative.
  ``significant_only`` fails only on drops that exceed the allowance AND are significant; it needs per-query data
  on both sides (a ConfigError otherwise).
- Verdict per metric: "ok" (held or improved), "FAIL" (dropped more than allowed; under significant_only: and
  significantly), "noise" (dropped more than allowed, not significant, significant_only set: not failed).
- Exit codes of ``lab gate``: 0 every metric holds, 1 a metric failed, 2 bad input (the message names the file).
"""
from __future__ import annotations

import json
import math
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd

import lab
from lab.analysis.compare import metrics_version_warning
from lab.core.errors import ConfigError, DataError
from lab.core.flat import nan_to_none
from lab.data.trec import read_qrels, read_trec_run
from lab.metrics import DEFAULT_METRICS, evaluate, paired_test, parse_metric
from lab.metrics.stats import N_RESAMPLES

#: Metrics gated when none are named.
DEFAULT_GATE_METRICS = ("ndcg@10",)
#: Default allowed drop: block a merge when nDCG@10 drops by more than 0.02.
DEFAULT_MAX_DROP = 0.02
#: Suffixes of per-query tables; a summary X.json picks up X.per_query<suffix> beside it.
PER_QUERY_SUFFIXES = (".parquet", ".csv", ".tsv", ".json")
#: Summary means and companion per-query means must agree to this.
MEAN_TOLERANCE = 1e-6
#: Floating-point slack when comparing a drop with its allowance.
_EPS = 1e-12


class GateWarning(UserWarning):
    """Inputs that can be gated but deserve a look (metrics versions, datasets or query sets differ)."""


@dataclass
class ResultFile:
    """A result read from disk: ``means`` of the metrics it holds, ``per_query`` table (None for a plain
    summary), ``figures`` (everything numeric: means, latency, ...), ``metrics_version`` and ``meta``."""

    path: Path
    kind: str  # "summary", "per_query" or "trec"
    means: dict[str, float]
    per_query: pd.DataFrame | None = None
    figures: dict[str, float] = field(default_factory=dict)
    metrics_version: str | None = None
    meta: dict = field(default_factory=dict)

    @property
    def n_queries(self) -> int | None:
        if self.per_query is not None:
            return len(self.per_query)
        n = self.meta.get("n_queries")
        return int(n) if isinstance(n, (int, float)) else None


# ---------------------------------------------------------------------------------------------------------------
# reading
# ---------------------------------------------------------------------------------------------------------------
def is_metric_name(name: str) -> bool:
    """True when ``name`` is a metric label as lab spells it ("ndcg@10", "mrr"), exactly (lower case)."""
    try:
        return parse_metric(name).label == name
    except ValueError:
        return False


def _number(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _check_per_query(df: pd.DataFrame, path: Path) -> pd.DataFrame:
    """Keep the metric columns, query ids as str; refuse an empty table, duplicate ids or NaN."""
    cols = [c for c in df.columns if is_metric_name(str(c))]
    if not cols:
        raise DataError(path, f"no metric columns (found {list(df.columns)[:8]})",
                        hint="a per-query table has one column per metric, e.g. ndcg@10 (lab run --per-query FILE)")
    df = df[cols].copy()
    df.columns = [str(c) for c in cols]
    df.index = df.index.astype(str)
    df.index.name = "query_id"
    if df.empty:
        raise DataError(path, "the per-query table has no rows")
    dup = df.index[df.index.duplicated()]
    if len(dup):
        raise DataError(path, f"query id {dup[0]!r} appears more than once", field="query_id")
    try:
        df = df.astype(float)
    except (TypeError, ValueError) as exc:
        raise DataError(path, f"a metric value is not a number ({exc})") from None
    bad = df.isna().any(axis=1)
    if bad.any():
        q = df.index[bad][0]
        col = df.columns[df.loc[q].isna().to_numpy()][0]
        raise DataError(path, f"query {q!r} has no value", field=col, hint="every evaluated query has a score (0 if "
                        "nothing relevant was retrieved)")
    return df


def read_per_query(path: str | Path) -> pd.DataFrame:
    """A per-query table (csv, tsv, parquet or JSON {qid: {metric: value}}): index query_id (str), one float
    column per metric; non-metric columns are dropped. DataError naming the file on anything else."""
    path = Path(path)
    try:
        if path.suffix == ".parquet":
            df = pd.read_parquet(path)
        elif path.suffix in (".csv", ".tsv"):
            raw = pd.read_csv(path, sep="\t" if path.suffix == ".tsv" else ",", dtype=str, keep_default_na=False)
            if raw.shape[1] < 2:
                raise DataError(path, "expected a query id column and at least one metric column",
                                hint="as `lab run --per-query FILE.csv` writes it")
            df = raw.set_index(raw.columns[0]).replace("", float("nan"))
        elif path.suffix == ".json":
            data = _load_json(path)
            if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
                raise DataError(path, "not a per-query table", hint="expected {query_id: {metric: value}}")
            df = pd.DataFrame.from_dict(data, orient="index")
        else:
            raise DataError(path, f"unknown per-query table suffix {path.suffix!r}",
                            hint=f"use one of {', '.join(PER_QUERY_SUFFIXES)}")
    except (OSError, ValueError, ImportError) as exc:
        if isinstance(exc, DataError):
            raise
        raise DataError(path, f"cannot read the per-query table: {exc}") from None
    return _check_per_query(df, path)


def _load_json(path: Path):
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise DataError(path, f"cannot read: {exc.strerror or exc}") from None
    if not text.strip():
        raise DataError(path, "the file is empty")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(path, f"invalid JSON: {exc.msg}", line=exc.lineno,
                        hint="expected the output of `lab evaluate --json` or `lab run --json`") from None


def _summary(path: Path, data: dict) -> ResultFile:
    """A summary JSON (lab evaluate/run --json, or an MLflow result.json artifact)."""
    meta = data.get("_meta") if isinstance(data.get("_meta"), dict) else {}
    version = meta.get("metrics_version")
    body = data
    if isinstance(data.get("summary"), dict) and not any(is_metric_name(k) for k in data):
        body = data["summary"]  # result.json artifact of lab.tracking.store
        version = data.get("metrics_version", version)
        info = data.get("info") if isinstance(data.get("info"), dict) else {}
        meta = {**info, "n_queries": data.get("n_queries"), "config": data.get("config")}
    figures, means = {}, {}
    for key, value in body.items():
        if key.startswith("_"):
            continue
        num = _number(value)
        if is_metric_name(key):
            if num is None or math.isnan(num):
                raise DataError(path, f"metric value is not a number: {value!r}", field=key)
            means[key] = num
        if num is not None:
            figures[key] = num
    if not means:
        raise DataError(path, "no metric keys at the top level",
                        hint="expected the JSON of `lab evaluate --json` / `lab run --json` (keys such as ndcg@10)")
    return ResultFile(path, "summary", means, None, figures, None if version is None else str(version), meta)


def looks_like_trec(path: Path) -> bool:
    """True when the first non-empty line of ``path`` has the 6 fields of a TREC run line (qid Q0 docid rank
    score tag); False for other files and files that cannot be read."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.strip():
                    return len(line.split()) == 6
    except OSError:
        return False
    return False


def companion_per_query(path: str | Path) -> Path | None:
    """The per-query table ``X.per_query.<suffix>`` beside a summary ``X.json``, or None."""
    path = Path(path)
    stem = path.name[: -len(".json")] if path.name.endswith(".json") else path.stem
    for suffix in PER_QUERY_SUFFIXES:
        cand = path.with_name(f"{stem}.per_query{suffix}")
        if cand.is_file():
            return cand
    return None


def attach_per_query(result: ResultFile, table_path: str | Path) -> ResultFile:
    """``result`` (a summary) with the per-query table at ``table_path`` attached; DataError when the table's
    means differ from the summary's by more than MEAN_TOLERANCE (a stale companion file)."""
    table = read_per_query(table_path)
    for m in sorted(set(table.columns) & set(result.means)):
        if abs(float(table[m].mean()) - result.means[m]) > MEAN_TOLERANCE:
            raise DataError(table_path,
                            f"mean {table[m].mean():.6f} differs from {result.path}'s {result.means[m]:.6f}",
                            field=m, hint="the per-query file does not belong to that summary; re-create both with "
                            "`lab run --json --per-query FILE`")
    result.per_query = table
    for m in table.columns:
        result.means.setdefault(m, float(table[m].mean()))
        result.figures.setdefault(m, result.means[m])
    result.meta["per_query_file"] = str(table_path)
    return result


def read_result(path: str | Path, qrels=None, metrics: Sequence[str] | None = None, rel_threshold: int = 1,
                companion: bool = True) -> ResultFile:
    """Read one result file (see the module docstring for the kinds). ``qrels``: a Qrels, a path to qrels, or
    None (needed for a TREC run). ``metrics``: what to evaluate a TREC run on (default: lab's DEFAULT_METRICS).
    ``companion``: attach ``X.per_query.*`` to a summary ``X.json``."""
    path = Path(path)
    if not path.is_file():
        raise DataError(path, "no such file" if not path.exists() else "not a file")
    if path.suffix in (".parquet", ".csv", ".tsv"):
        table = read_per_query(path)
        means = {m: float(table[m].mean()) for m in table.columns}
        return ResultFile(path, "per_query", means, table, dict(means))
    if path.suffix == ".json":
        data = _load_json(path)
        if not isinstance(data, dict):
            raise DataError(path, f"expected a JSON object, got {type(data).__name__}")
        if data and all(isinstance(v, dict) for v in data.values()) and "summary" not in data:
            table = read_per_query(path)
            means = {m: float(table[m].mean()) for m in table.columns}
            return ResultFile(path, "per_query", means, table, dict(means))
        res = _summary(path, data)
        extra = companion_per_query(path) if companion else None
        return attach_per_query(res, extra) if extra else res
    if not looks_like_trec(path):
        raise DataError(path, "not a result file: expected a summary JSON, a per-query table (.csv/.tsv/.parquet/"
                        ".json) or a TREC run (qid Q0 docid rank score tag)")
    if qrels is None:
        raise DataError(path, "is a TREC run: pass --qrels QRELS to evaluate it")
    return _evaluate_trec(path, qrels, metrics, rel_threshold)


def _evaluate_trec(path: Path, qrels, metrics, rel_threshold: int) -> ResultFile:
    q = read_qrels(qrels) if isinstance(qrels, (str, Path)) else qrels
    run = read_trec_run(path)
    try:
        ev = evaluate(q, run, list(metrics or DEFAULT_METRICS), rel_threshold=rel_threshold)
    except ValueError as exc:
        raise DataError(path, f"cannot evaluate against the qrels: {exc}") from None
    pq = _check_per_query(ev.per_query, path)
    means = {m: float(v) for m, v in ev.means.items()}
    meta = {"n_queries": ev.n_queries, "n_excluded": len(ev.excluded), "qrels": str(qrels) if isinstance(
        qrels, (str, Path)) else getattr(q, "name", "")}
    return ResultFile(path, "trec", means, pq, dict(means), str(lab.METRICS_VERSION), meta)


# ---------------------------------------------------------------------------------------------------------------
# checks
# ---------------------------------------------------------------------------------------------------------------
def version_warning(versions: Iterable[str | None]) -> str | None:
    """A warning when the recorded metrics versions differ (or differ from this lab's), else None; inputs that
    record none (per-query tables) are left out (lab.analysis.compare.metrics_version_warning)."""
    vals = [str(v) for v in versions if v not in (None, "")]
    return metrics_version_warning(vals, current=str(lab.METRICS_VERSION)) if vals else None


def input_warnings(base: ResultFile, cur: ResultFile) -> list[str]:
    """Warnings about comparing ``cur`` with ``base``: metrics versions, dataset fingerprints, query counts."""
    notes = []
    v = version_warning([base.metrics_version, cur.metrics_version])
    if v:
        notes.append(v)
    fb, fc = base.meta.get("dataset_fingerprint"), cur.meta.get("dataset_fingerprint")
    if fb and fc and fb != fc:
        notes.append(f"dataset fingerprints differ ({fb} in the baseline, {fc} now): expected when the knowledge "
                     "base changed; otherwise the two results are not about the same data")
    nb, nc = base.n_queries, cur.n_queries
    if nb is not None and nc is not None and nb != nc:
        notes.append(f"the baseline scored {nb} queries, the current result {nc}")
    return notes


# ---------------------------------------------------------------------------------------------------------------
# the gate
# ---------------------------------------------------------------------------------------------------------------
@dataclass
class GateRow:
    """One gated metric. diff = current - baseline; allowed = the largest drop tolerated (>= 0);
    p_value / ci_low / ci_high / n_paired: the paired test (NaN / 0 without per-query data on both sides)."""

    metric: str
    baseline: float
    current: float
    diff: float
    allowed: float
    exceeds: bool
    p_value: float = math.nan
    ci_low: float = math.nan
    ci_high: float = math.nan
    n_paired: int = 0
    significant: bool = False
    verdict: str = "ok"

    @property
    def failed(self) -> bool:
        return self.verdict == "FAIL"


@dataclass
class GateReport:
    """The outcome: one GateRow per metric, ``passed`` when none failed, warnings, and the settings used."""

    baseline: str
    current: str
    rows: list[GateRow]
    max_drop: float
    relative: bool
    significant_only: bool
    alpha: float
    warnings: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not any(r.failed for r in self.rows)

    @property
    def exit_code(self) -> int:
        return 0 if self.passed else 1

    def to_dict(self) -> dict:
        """JSON-ready dict (NaN as None)."""
        rows = [{k: nan_to_none(v) for k, v in asdict(r).items()} | {"failed": r.failed} for r in self.rows]
        return {"passed": self.passed, "baseline": self.baseline, "current": self.current,
                "max_drop": self.max_drop, "relative": self.relative, "significant_only": self.significant_only,
                "alpha": self.alpha, "rows": rows, "warnings": list(self.warnings)}

    def table(self) -> str:
        """The fixed-width table ``lab gate`` prints, with a one-line verdict."""
        allow = f"{self.max_drop:g} of the baseline (relative)" if self.relative else f"{self.max_drop:g} (absolute)"
        head = [f"gate: {self.current} vs baseline {self.baseline}; max drop {allow}"
                + (f", significant drops only (alpha {self.alpha:g})" if self.significant_only else "")]
        def f4(v):
            return "-" if math.isnan(v) else f"{v:.4f}"

        show = pd.DataFrame({
            "metric": [r.metric for r in self.rows],
            "baseline": [f4(r.baseline) for r in self.rows],
            "current": [f4(r.current) for r in self.rows],
            "diff": [f"{r.diff:+.4f}" for r in self.rows],
            "allowed": [f"-{r.allowed:.4f}" for r in self.rows],
            "paired 95% CI": ["-" if math.isnan(r.ci_low) else f"[{r.ci_low:+.4f}, {r.ci_high:+.4f}]"
                              for r in self.rows],
            "p": ["-" if math.isnan(r.p_value) else f"{r.p_value:.3g}" for r in self.rows],
            "n": [str(r.n_paired) if r.n_paired else "-" for r in self.rows],
            "verdict": [r.verdict for r in self.rows],
        })
        lines = head + [show.to_string(index=False)]
        failed = [r.metric for r in self.rows if r.failed]
        noise = [r.metric for r in self.rows if r.verdict == "noise"]
        if failed:
            lines.append(f"FAILED: {', '.join(failed)} dropped more than allowed"
                         + (" (significant)" if self.significant_only else ""))
        else:
            lines.append(f"PASSED: all {len(self.rows)} metric(s) hold")
        if noise:
            lines.append(f"note: {', '.join(noise)} dropped more than allowed but not significantly "
                         f"(p >= {self.alpha:g}); not failed under --significant-only")
        if any(math.isnan(r.p_value) for r in self.rows):
            lines.append("no paired test where either side lacks per-query data (pass per-query files, "
                         "X.per_query.csv beside X.json, or TREC runs with --qrels)")
        lines += [f"warning: {w}" for w in self.warnings]
        return "\n".join(lines)


def allowed_drop(baseline: float, max_drop: float, relative: bool) -> float:
    """The largest drop tolerated: |max_drop| (absolute) or |max_drop| x |baseline| (relative)."""
    return abs(max_drop) * abs(baseline) if relative else abs(max_drop)


def gate_metric(metric: str, base: ResultFile, cur: ResultFile, max_drop: float, relative: bool,
                significant_only: bool, alpha: float, n_resamples: int, seed: int) -> GateRow:
    """The GateRow of one metric (see the module docstring for the rules)."""
    b, c = base.means[metric], cur.means[metric]
    allowed = allowed_drop(b, max_drop, relative)
    exceeds = (b - c) > allowed + _EPS
    row = GateRow(metric, b, c, c - b, allowed, exceeds)
    if base.per_query is not None and cur.per_query is not None:
        common = base.per_query.index.intersection(cur.per_query.index, sort=False)
        if len(common):
            t = paired_test(cur.per_query.loc[common, metric].to_numpy(), base.per_query.loc[common, metric].to_numpy(),
                            n_resamples=n_resamples, seed=seed)
            row.p_value, row.ci_low, row.ci_high, row.n_paired = t["p_permutation"], t["ci_low"], t["ci_high"], t["n"]
            row.significant = bool(t["p_permutation"] < alpha and t["diff"] < 0)
    if not exceeds:
        row.verdict = "ok"
    elif significant_only and not row.significant:
        row.verdict = "noise"
    else:
        row.verdict = "FAIL"
    return row


def gate_settings(metrics: Sequence[str] | None, max_drop: float, relative: bool, alpha: float) -> list[str]:
    """The metrics to gate (``metrics``, default DEFAULT_GATE_METRICS, each once, in order) once the settings are
    checked: every metric written as its canonical label (lab.metrics.parse_metric: 'ndcg@10', not 'NDCG@10'),
    ``alpha`` strictly between 0 and 1, ``max_drop`` a number and, with ``relative``, a fraction below 1.
    ConfigError (exit 2) naming the option (--metric, --alpha, --max-drop) otherwise."""
    names = list(dict.fromkeys(metrics or DEFAULT_GATE_METRICS))
    for m in names:
        try:
            if parse_metric(m).label != m:
                raise ValueError(f"metric {m!r}: write it as {parse_metric(m).label!r}")
        except ValueError as exc:
            raise ConfigError(f"--metric: {exc}") from None
    if not 0 < alpha < 1:
        raise ConfigError(f"--alpha {alpha}: must lie strictly between 0 and 1, e.g. 0.05")
    if math.isnan(max_drop) or (relative and abs(max_drop) >= 1):
        raise ConfigError(f"--max-drop {max_drop}: with --relative, a fraction below 1 (0.02 = 2%)")
    return names


def run_gate(base: ResultFile, cur: ResultFile, metrics: Sequence[str] | None = None,
             max_drop: float = DEFAULT_MAX_DROP, relative: bool = False, significant_only: bool = False,
             alpha: float = 0.05, n_resamples: int = N_RESAMPLES, seed: int = 0) -> GateReport:
    """Gate ``cur`` against ``base`` on ``metrics`` (default DEFAULT_GATE_METRICS). ConfigError (exit 2) when a
    metric is unknown or missing from a file, when significant_only lacks per-query data or paired queries, or
    when alpha / max_drop are out of range; GateWarning for each input warning (also in report.warnings)."""
    names = gate_settings(metrics, max_drop, relative, alpha)
    for res, side in ((base, "baseline"), (cur, "current")):
        missing = [m for m in names if m not in res.means]
        if missing:
            raise DataError(res.path, f"no {', '.join(missing)} in the {side} result",
                            hint=f"it holds {', '.join(sorted(res.means)) or 'no metrics'}; pick --metric among them "
                            "or re-evaluate with that metric")
    notes = input_warnings(base, cur)
    if significant_only:
        lacking = [str(r.path) for r in (base, cur) if r.per_query is None]
        if lacking:
            raise ConfigError(f"--significant-only needs per-query data on both sides; {', '.join(lacking)} "
                              "holds means only (write X.per_query.csv beside X.json with `lab run --per-query`, "
                              "or pass TREC runs with --qrels)")
        if not len(base.per_query.index.intersection(cur.per_query.index)):
            raise ConfigError(f"--significant-only: {base.path} and {cur.path} share no query id; nothing to pair")
    if base.per_query is not None and cur.per_query is not None:
        common = base.per_query.index.intersection(cur.per_query.index)
        if len(common) < max(len(base.per_query), len(cur.per_query)):
            notes.append(f"paired test on the {len(common)} queries both scored (baseline {len(base.per_query)}, "
                         f"current {len(cur.per_query)})")
    rows = [gate_metric(m, base, cur, max_drop, relative, significant_only, alpha, n_resamples, seed) for m in names]
    for n in notes:
        warnings.warn(n, GateWarning, stacklevel=2)
    return GateReport(str(base.path), str(cur.path), rows, abs(max_drop), relative, significant_only, alpha, notes)


def gate_files(baseline: str | Path, current: str | Path, metrics: Sequence[str] | None = None,
               qrels=None, rel_threshold: int = 1, **kwargs) -> GateReport:
    """:func:`run_gate` on two files read by :func:`read_result` (TREC runs evaluated on the gated metrics)."""
    names = list(metrics or DEFAULT_GATE_METRICS)
    base = read_result(baseline, qrels=qrels, metrics=names, rel_threshold=rel_threshold)
    cur = read_result(current, qrels=qrels, metrics=names, rel_threshold=rel_threshold)
    return run_gate(base, cur, names, **kwargs)


def report_json(report: GateReport) -> str:
    """``lab gate --json`` output."""
    return json.dumps(report.to_dict(), indent=2)
