"""``http``: evaluate any retrieval service over HTTP (``--strategy http --set url=http://host:port/retrieve``).

The strategy sends each query to the user's endpoint and maps the JSON answer to hits, so a production RAG
system is measured with the workbench's metrics, CIs, sweeps and reports without porting its code.

Request
- ``method`` "POST" (default): JSON body from ``body`` (default ``{"query": "{query}", "k": "{k}",
  "query_id": "{query_id}"}``). "GET": query-string params from ``params`` (default ``{"query": "{query}",
  "k": "{k}"}``); ``params`` also adds a query string to a POST.
- Placeholders (:func:`fill_template`): a string value that is exactly ``"{k}"`` becomes the integer k,
  exactly ``"{query}"`` / ``"{query_id}"`` the query text / id; inside longer strings they are replaced as text.
  No other brace is touched, so JSON-looking templates need no escaping.
- Headers from the environment only (``headers_env: {"Authorization": "API_TOKEN"}``: the variable holds the
  whole value; or ``"Bearer $API_TOKEN"`` to expand variables inside a value). Values are never logged: not in
  :meth:`HttpRetriever.describe`, params, errors (every error text is redacted of them) or the progress bar.
  Credentials in the URL (``user:pass@``) are refused for the same reason.

Response mapping (:func:`parse_hits`)
- ``hits_path``: a small JSON path to the list of hits (dot-separated keys, integer list indexes, optional
  leading ``$.``; "" or "$" = the whole answer). Default: auto, which finds a bare list or the first list under
  hits / results / documents / docs / data / matches / items, one level deep (so Elasticsearch's
  ``{"hits": {"hits": [...]}}`` works too).
- ``id_field`` / ``score_field`` / ``text_field``: paths inside one hit. Defaults: the first present of
  :data:`ID_FIELDS`, :data:`SCORE_FIELDS`, :data:`TEXT_FIELDS`. A hit may also be a bare id or an [id, score]
  pair. Hits without a score (or ``score_field: rank``) are scored by rank (n - rank), which keeps the service's
  order. Scores must be finite numbers. A document returned twice keeps its best score (counted).
- The hits of a query are cut to k in the Run tie order (score descending, then doc id descending).

Failures and retries
- ``concurrency`` requests in flight at most (default 16; asyncio + aiohttp), ``timeout`` seconds per request.
- Retried ``retries`` times (default 3): timeouts, connection errors, 429 and 5xx. The wait before retry n
  (0-based) is :func:`lab.core.net.backoff_delay` (``backoff`` * 2**n capped at ``max_backoff``, times a
  jitter in [0.5, 1.5) from a generator seeded by (ctx.seed, query id), so waits are reproducible), or the
  server's ``Retry-After`` when that is longer (capped at ``max_retry_after``).
- Not retried: other 4xx, an answer that is not JSON, an answer whose shape does not match the mapping.
- A query that still fails is **recorded, never dropped**: it is in the Run with no hits (so it scores 0 on
  every metric and counts in the means), and counted and listed in :meth:`describe` (``http_failed``,
  ``http_error_rate``, ``http_failed_queries``, ``http_first_error``). When every query fails (a wrong URL or
  token, most likely) or the error rate exceeds ``max_error_rate``, ``search`` raises :class:`HttpRetrieverError`.

Latency: ``Run.latency[qid]`` is the wall time of the request that answered the query (its own request time,
not the backoff waits before it), in seconds; failed queries have none. Requests run ``concurrency`` at a time,
so under load the time includes the service's queueing: ``concurrency=1`` gives the searched-alone convention
of :mod:`lab.retrievers.base`.

Unknown ids: hit ids that match no document of the indexed corpus are counted (``http_unknown_ids``) and the
first few shown (``http_unknown_examples``): they usually mean an id-mapping mistake. ``map_unknown: text``
maps such a hit to the document whose text equals, or uniquely contains, the hit's text (whitespace and case
normalised); mapped hits are counted (``http_mapped_by_text``). Unknown hits stay in the run (they score as not
relevant), so the metrics show what the service returned.

``index(corpus)`` only remembers the corpus ids (and texts for ``map_unknown: text``): the service has its own
index. For tests, benchmarks and demos, :mod:`lab.experiment.serve` serves one of our own strategies over HTTP
(``python -m lab.experiment.serve --dataset data/ord-qa --strategy bm25 --port 8765``).
"""
from __future__ import annotations

import asyncio
import json
import math
import random
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Mapping

from lab.core.errors import ConfigError, LabError
from lab.core.net import backoff_delay, parse_retry_after, public_url, redact, resolve_headers
from lab.core.progress import progress
from lab.data.types import Corpus, Queries, Run
from lab.retrievers.base import BaseRetriever, Context, register
from lab.retrievers.params import COUNT, above, at_least, between, one_of

ID_FIELDS = ("id", "doc_id", "docid", "_id", "document_id", "corpus_id", "pid")
SCORE_FIELDS = ("score", "_score", "relevance_score", "similarity", "rerank_score")
TEXT_FIELDS = ("text", "content", "passage", "page_content", "body", "chunk")
HIT_LIST_KEYS = ("hits", "results", "documents", "docs", "data", "matches", "items")
DEFAULT_BODY = {"query": "{query}", "k": "{k}", "query_id": "{query_id}"}
DEFAULT_GET_PARAMS = {"query": "{query}", "k": "{k}"}
#: How many failed query ids / unknown ids are listed in describe() (all are counted).
LIST_LIMIT = 20
EXAMPLES = 5


class HttpRetrieverError(LabError):
    """The service failed for too many queries (all of them, or more than ``max_error_rate``)."""


class ResponseError(ValueError):
    """An answer that does not fit the response mapping (not retried)."""


# ------------------------------------------------------------------------------------------------ pure helpers
def fill_template(template: Any, query: str, k: int, query_id: str) -> Any:
    """A copy of ``template`` (dicts, lists, scalars) with the placeholders filled (see the module docstring):
    ``"{k}"`` alone -> int k; ``"{query}"`` / ``"{query_id}"`` alone -> the string; inside text -> replaced."""
    if isinstance(template, Mapping):
        return {str(key): fill_template(v, query, k, query_id) for key, v in template.items()}
    if isinstance(template, (list, tuple)):
        return [fill_template(v, query, k, query_id) for v in template]
    if isinstance(template, str):
        if template == "{k}":
            return int(k)
        if template == "{query}":
            return query
        if template == "{query_id}":
            return query_id
        return template.replace("{query}", query).replace("{query_id}", query_id).replace("{k}", str(int(k)))
    return template


def split_path(path: str | None) -> list[str]:
    """Segments of a small JSON path: ``"$.data.0.hits"`` -> ["data", "0", "hits"]; "" / "$" / None -> []."""
    p = (path or "").strip()
    if p.startswith("$"):
        p = p[1:].lstrip(".")
    return [s for s in p.split(".") if s != ""] if p else []


_MISSING = object()


def get_path(obj: Any, path: str | list[str] | None, default: Any = _MISSING) -> Any:
    """The value at ``path`` in ``obj`` (dict keys; integer segments index lists). Missing: ``default`` when
    given, else ResponseError naming the segment and the keys that were there."""
    segments = split_path(path) if not isinstance(path, list) else path
    node = obj
    for i, seg in enumerate(segments):
        where = ".".join(segments[: i + 1])
        if isinstance(node, Mapping) and seg in node:
            node = node[seg]
        elif isinstance(node, list) and re.fullmatch(r"-?\d+", seg) and -len(node) <= int(seg) < len(node):
            node = node[int(seg)]
        else:
            if default is not _MISSING:
                return default
            have = (f"keys: {', '.join(map(str, list(node)[:12]))}" if isinstance(node, Mapping)
                    else f"a {type(node).__name__}" + (f" of {len(node)}" if isinstance(node, list) else ""))
            raise ResponseError(f"no {where!r} in the answer (found {have})")
    return node


def find_hits(payload: Any, hits_path: str | None = None) -> list:
    """The list of hits of an answer: at ``hits_path`` when given, else auto (see the module docstring)."""
    if hits_path is not None and hits_path != "auto":
        hits = get_path(payload, hits_path)
        if not isinstance(hits, list):
            raise ResponseError(f"{hits_path!r} in the answer is a {type(hits).__name__}, not a list of hits")
        return hits
    if isinstance(payload, list):
        return payload
    if isinstance(payload, Mapping):
        for key in HIT_LIST_KEYS:
            value = payload.get(key)
            if isinstance(value, list):
                return value
            if isinstance(value, Mapping):
                for inner in HIT_LIST_KEYS:
                    if isinstance(value.get(inner), list):
                        return value[inner]
        raise ResponseError(f"no list of hits in the answer (keys: {', '.join(map(str, list(payload)[:12]))}); "
                            "set hits_path, e.g. --set hits_path=data.results")
    raise ResponseError(f"the answer is a JSON {type(payload).__name__}, not an object or a list of hits")


def _as_score(value: Any, rank: int) -> float:
    if type(value) is float and math.isfinite(value):
        return value
    where = f"hit {rank}"
    try:
        score = float(value)
    except (TypeError, ValueError):
        raise ResponseError(f"{where}: score {value!r} is not a number") from None
    if not math.isfinite(score):
        raise ResponseError(f"{where}: score {value!r} is not finite")
    return score


def parse_hits(payload: Any, hits_path: str | None = None, id_field: str | None = None,
               score_field: str | None = None, text_field: str | None = None) -> list[tuple[str, float, str | None]]:
    """``[(doc id, score, text or None)]`` of one answer, in the service's order (see the module docstring).

    ``score_field="rank"`` ignores the service's scores and scores by rank (n - rank). Auto field names are
    looked up per hit. Raises ResponseError when the answer does not fit (no hit list, a hit without an id, a
    score that is not a finite number, some hits with a score and others without)."""
    hits = find_hits(payload, hits_path)
    n = len(hits)
    out: list[tuple[str, float, str | None]] = []
    scored = None
    by_rank = score_field == "rank"
    id_get, score_get, text_get = _getter(id_field), _getter(None if by_rank else score_field), _getter(text_field)
    for rank, hit in enumerate(hits):
        text = score = None
        if isinstance(hit, dict):
            raw_id = id_get(hit, ID_FIELDS)
            if raw_id is _MISSING:
                raise ResponseError(f"hit {rank} has no {'id field' if id_field is None else repr(id_field)} (keys: "
                                    f"{', '.join(map(str, list(hit)[:12]))}); set id_field, e.g. "
                                    "--set id_field=metadata.doc_id")
            if not isinstance(raw_id, (str, int)) or isinstance(raw_id, bool):
                raise ResponseError(f"hit {rank}: id is a {type(raw_id).__name__}, not a string or number")
            doc_id = raw_id if type(raw_id) is str else str(raw_id)
            if not by_rank:
                score = score_get(hit, SCORE_FIELDS)
                if score is _MISSING:
                    if score_field is not None:
                        raise ResponseError(f"hit {rank} has no {score_field!r}")
                    score = None
            tval = text_get(hit, TEXT_FIELDS)
            text = tval if type(tval) is str else None
        elif isinstance(hit, (str, int)) and not isinstance(hit, bool):
            doc_id = str(hit)
        elif isinstance(hit, list) and len(hit) == 2 and isinstance(hit[0], (str, int)):
            doc_id, score = str(hit[0]), (None if by_rank else hit[1])
        else:
            raise ResponseError(f"hit {rank} is a {type(hit).__name__}; "
                                "expected an object, an id or an [id, score] pair")
        has = score is not None
        if scored is None:
            scored = has
        elif scored != has:
            raise ResponseError(f"hit {rank}: some hits have a score and others do not")
        out.append((doc_id, _as_score(score, rank) if has else float(n - rank), text))
    return out


def _getter(path: str | None):
    """``get(hit, auto_names) -> value or _MISSING`` for a field path (None: the first present of auto_names);
    one-segment paths are a plain dict lookup (the common case, kept fast)."""
    if path is None:
        def auto(hit, names):
            for name in names:
                if name in hit:
                    return hit[name]
            return _MISSING
        return auto
    segments = split_path(path)
    if len(segments) == 1:
        key = segments[0]
        return lambda hit, names: hit.get(key, _MISSING)
    return lambda hit, names: get_path(hit, segments, _MISSING)


def text_key(text: str) -> str:
    """Text normalised for matching: case folded, runs of whitespace collapsed to one space, stripped."""
    return " ".join(str(text).split()).casefold()


# ------------------------------------------------------------------------------------------------ the strategy
@dataclass
class QueryOutcome:
    """One query's fate: hits (empty when failed), the answering request's seconds, attempts, error text."""

    query_id: str
    hits: list[tuple[str, float, str | None]] = field(default_factory=list)
    seconds: float | None = None
    attempts: int = 0
    error: str = ""
    status: str = ""  # last HTTP status, or "timeout" / "connection"

    @property
    def ok(self) -> bool:
        return not self.error


@register("http", rules={"method": one_of("GET", "POST"), "map_unknown": one_of("none", "text"), "concurrency": COUNT,
                         "timeout": above(0), "retries": at_least(0), "backoff": at_least(0),
                         "max_backoff": at_least(0),
                         "max_retry_after": at_least(0), "max_error_rate": between(0, 1)})
class HttpRetriever(BaseRetriever):
    """A retrieval service behind an HTTP endpoint (see the module docstring for every param)."""

    name = "http"

    def __init__(self, ctx: Context | None = None, *, url: str | None = None, method: str = "POST",  # noqa: PLR0913 - the strategy's registered params, keyword-only
                 body: Mapping[str, Any] | list | str | None = None, params: Mapping[str, Any] | str | None = None,
                 headers_env: Mapping[str, str] | None = None,
                 hits_path: str | None = None, id_field: str | None = None, score_field: str | None = None,
                 text_field: str | None = None, map_unknown: str = "none", concurrency: int = 16,
                 timeout: float = 30.0, retries: int = 3, backoff: float = 0.5, max_backoff: float = 10.0,
                 max_retry_after: float = 60.0, max_error_rate: float | None = None):
        self.ctx = ctx or Context()
        if not url:
            raise ConfigError("strategy http needs the endpoint: --set url=http://127.0.0.1:8000/retrieve")
        self.url = str(url).strip()
        self._public_url = public_url(self.url)
        self.method = str(method).upper()
        if self.method not in ("GET", "POST"):
            raise ConfigError(f"method {method!r}: use POST (JSON body) or GET (query params)")
        self.body = _template(body, "body") if body is not None else (DEFAULT_BODY if self.method == "POST" else None)
        self.query_params = (_template(params, "params") if params is not None
                             else (DEFAULT_GET_PARAMS if self.method == "GET" else None))
        if self.query_params is not None and not isinstance(self.query_params, Mapping):
            raise ConfigError("params: give a mapping of query-string names to templates, e.g. "
                              "--set params.q={query} --set params.size={k}")
        if self.method == "GET" and self.body is not None and body is not None:
            raise ConfigError("method GET sends no body; put the query in params (e.g. --set params.q={query})")
        self.headers_env = dict(headers_env or {})
        self._headers = resolve_headers(self.headers_env)  # fail early, before indexing
        self.hits_path, self.id_field, self.score_field, self.text_field = hits_path, id_field, score_field, text_field
        if map_unknown not in ("none", "text"):
            raise ConfigError(f"map_unknown {map_unknown!r}: use none or text")
        self.map_unknown = map_unknown
        for key, value, low in (("concurrency", concurrency, 1), ("retries", retries, 0)):
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ConfigError(f"{key}={value!r}: must be an integer >= {low}")
        for key, value in (("timeout", timeout), ("backoff", backoff), ("max_backoff", max_backoff),
                           ("max_retry_after", max_retry_after)):
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0 or (key == "timeout"
                                                                                               and value == 0):
                raise ConfigError(f"{key}={value!r}: must be a number of seconds" + (" > 0" if key == "timeout"
                                                                                     else " >= 0"))
        self.concurrency, self.timeout, self.retries = concurrency, float(timeout), retries
        self.backoff, self.max_backoff = float(backoff), float(max_backoff)
        self.max_retry_after = float(max_retry_after)
        if max_error_rate is not None and not (0 <= float(max_error_rate) <= 1):
            raise ConfigError(f"max_error_rate={max_error_rate!r}: a fraction in [0, 1], or leave it unset")
        self.max_error_rate = None if max_error_rate is None else float(max_error_rate)
        self._ids: set[str] | None = None
        self._by_text: dict[str, str | None] = {}
        self._doc_texts: list[tuple[str, str]] = []
        self._text_cache: dict[str, str | None] = {}
        self._outcomes: dict[str, QueryOutcome] = {}
        self._stats: dict[str, float] = {}
        self._unknown_examples: list[str] = []

    # ---------------------------------------------------------------------------------------------- protocol
    def index(self, corpus: Corpus) -> None:
        """Remember the corpus ids (to count unknown hit ids) and, for ``map_unknown: text``, its texts."""
        self._ids = set(corpus.docs)
        self._by_text, self._doc_texts, self._text_cache = {}, [], {}
        if self.map_unknown == "text":
            for doc in corpus:
                for t in {text_key(doc.text), text_key(f"{doc.title} {doc.text}")}:
                    self._by_text[t] = doc.id if self._by_text.get(t, doc.id) == doc.id else None  # None: ambiguous
                self._doc_texts.append((doc.id, text_key(f"{doc.title} {doc.text}")))

    def search_one(self, text: str, k: int) -> list[tuple[str, float]]:
        """One query's hits: a one-query :meth:`search` (its id is "q"), in the Run tie order."""
        return self.search(Queries({"q": text}), k).ranked("q", k)

    def search(self, queries: Queries, k: int = 100) -> Run:
        """Send every query (``concurrency`` at a time) and build the Run; see the module docstring for failures,
        latency and unknown ids. Runs its own event loop (in a worker thread when one is already running, as in
        Jupyter)."""
        items = [(qid, queries[qid]) for qid in queries]
        outcomes = _run_coroutine(lambda: self._search_all(items, k))
        self._outcomes = {o.query_id: o for o in outcomes}
        scores, latency = {}, {}
        unknown = mapped = duplicates = 0
        examples: list[str] = []
        for qid, _ in items:
            o = self._outcomes[qid]
            hits: dict[str, float] = {}
            for doc_id, score, text in o.hits:
                if self._ids is not None and doc_id not in self._ids:
                    unknown += 1
                    if doc_id not in examples and len(examples) < EXAMPLES:
                        examples.append(doc_id)
                    target = self._map_text(text) if self.map_unknown == "text" and text else None
                    if target is not None:
                        mapped += 1
                        doc_id = target
                if doc_id in hits:
                    duplicates += 1
                    hits[doc_id] = max(hits[doc_id], score)
                else:
                    hits[doc_id] = score
            top = sorted(hits.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)[:k]
            scores[qid] = dict(top)
            if o.ok and o.seconds is not None:
                latency[qid] = o.seconds
        failed = [o for o in outcomes if not o.ok]
        n = len(items)
        self._unknown_examples = examples
        self._stats = {
            "http_queries": n, "http_ok": n - len(failed), "http_failed": len(failed),
            "http_error_rate": (len(failed) / n) if n else 0.0,
            "http_attempts": sum(o.attempts for o in outcomes),
            "http_retries": sum(max(0, o.attempts - 1) for o in outcomes),
            "http_hits": sum(len(o.hits) for o in outcomes),
            "http_unknown_ids": unknown, "http_mapped_by_text": mapped, "http_duplicate_ids": duplicates,
        }
        if n and failed and (len(failed) == n or (self.max_error_rate is not None
                                                   and len(failed) / n > self.max_error_rate)):
            first = failed[0]
            raise HttpRetrieverError(
                f"{self._public_url}: {len(failed)} of {n} queries failed (error rate {len(failed) / n:.1%}"
                + (f" > max_error_rate {self.max_error_rate:g}" if len(failed) < n else "")
                + f"); first, query {first.query_id!r} after {first.attempts} attempt(s): {first.error}. "
                "Check the url, the headers_env variables and the response mapping (hits_path, id_field, score_field)")
        return Run(scores, name=self.name, latency=latency)

    # ---------------------------------------------------------------------------------------------- reporting
    def diagnostics(self) -> dict[str, float]:
        """Numbers of the last search (metric-like, for MLflow): http_queries, http_ok, http_failed,
        http_error_rate, http_attempts, http_retries, http_hits, http_unknown_ids, http_mapped_by_text,
        http_duplicate_ids. Empty before a search."""
        return dict(self._stats)

    def failures(self) -> list[dict]:
        """Every failed query of the last search: query_id, error (redacted), attempts, status."""
        return [{"query_id": o.query_id, "error": o.error, "attempts": o.attempts, "status": o.status}
                for o in self._outcomes.values() if not o.ok]

    def describe(self) -> dict:
        """Config (URL without query string, header *names* only) and, after a search, the diagnostics, the first
        failed query ids and error, the first unknown ids, and the count of answers per HTTP status."""
        out: dict[str, Any] = {
            "strategy": self.name, "url": self._public_url, "method": self.method,
            "hits_path": self.hits_path or "auto", "id_field": self.id_field or "auto",
            "score_field": self.score_field or "auto", "text_field": self.text_field or "auto",
            "map_unknown": self.map_unknown, "concurrency": self.concurrency, "timeout_s": self.timeout,
            "retries": self.retries, "backoff_s": self.backoff, "max_backoff_s": self.max_backoff,
            "header_names": ",".join(sorted(self.headers_env)) or "none",
        }
        if self._stats:
            out.update(self._stats)
            failed = [o for o in self._outcomes.values() if not o.ok]
            out["http_failed_queries"] = ",".join(o.query_id for o in failed[:LIST_LIMIT]) + (
                f",... ({len(failed)} in all)" if len(failed) > LIST_LIMIT else "")
            out["http_first_error"] = failed[0].error if failed else ""
            out["http_unknown_examples"] = ",".join(self._unknown_examples)
            statuses: dict[str, int] = {}
            for o in self._outcomes.values():
                statuses[o.status or "none"] = statuses.get(o.status or "none", 0) + 1
            out["http_final_status"] = statuses
        return out

    # ---------------------------------------------------------------------------------------------- internals
    def _map_text(self, text: str) -> str | None:
        """The one document whose normalised text equals or contains ``text`` (None: none or several)."""
        key = text_key(text)
        if not key:
            return None
        if key in self._by_text:
            return self._by_text[key]
        if key not in self._text_cache:
            found = [doc_id for doc_id, t in self._doc_texts if key in t]
            self._text_cache[key] = found[0] if len(found) == 1 else None
        return self._text_cache[key]

    async def _search_all(self, items: list[tuple[str, str]], k: int) -> list[QueryOutcome]:
        import aiohttp

        sem = asyncio.Semaphore(self.concurrency)
        connector = aiohttp.TCPConnector(limit=self.concurrency, limit_per_host=self.concurrency)
        async with aiohttp.ClientSession(connector=connector, raise_for_status=False) as session:
            tasks = [asyncio.ensure_future(self._one(session, sem, qid, text, k)) for qid, text in items]
            try:
                for fut in progress(asyncio.as_completed(tasks), desc=f"search {self.name}", total=len(tasks),
                                    enabled=self.ctx.progress, unit="query"):
                    await fut
            finally:
                for t in tasks:
                    t.cancel()
            return [t.result() for t in tasks]

    async def _one(self, session, sem: asyncio.Semaphore, qid: str, text: str, k: int) -> QueryOutcome:
        import aiohttp

        rng = random.Random(f"{self.ctx.seed}:{qid}")
        out = QueryOutcome(qid)
        body = fill_template(self.body, text, k, qid) if self.body is not None else None
        qparams = ({str(key): str(v) for key, v in fill_template(self.query_params, text, k, qid).items()}
                   if self.query_params is not None else None)
        secrets = list(self._headers.values())
        for attempt in range(self.retries + 1):
            out.attempts = attempt + 1
            retry_after, retryable = None, False
            async with sem:
                t0 = time.perf_counter()
                try:
                    async with session.request(self.method, self.url, json=body, params=qparams,
                                               headers=self._headers,
                                               timeout=aiohttp.ClientTimeout(total=self.timeout)) as resp:
                        raw = await resp.read()
                        seconds = time.perf_counter() - t0
                        status = resp.status
                        retry_after = parse_retry_after(resp.headers)
                except TimeoutError:  # asyncio's timeout is the builtin TimeoutError since 3.11
                    status, raw, seconds = "timeout", b"", None
                except aiohttp.ClientError as exc:
                    status, raw, seconds = "connection", redact(f"{type(exc).__name__}: {exc}", secrets).encode(), None
            out.status = str(status)
            if status == "timeout":
                out.error, retryable = f"timeout after {self.timeout:g} s", True
            elif status == "connection":
                out.error, retryable = raw.decode(errors="replace"), True
            elif 200 <= status < 300:
                try:
                    payload = json.loads(raw)
                except ValueError as exc:
                    out.error = f"HTTP {status} but the answer is not JSON ({exc}): {_snippet(raw)}"
                else:
                    try:
                        out.hits = parse_hits(payload, self.hits_path, self.id_field, self.score_field,
                                              self.text_field)
                        out.seconds, out.error = seconds, ""
                        return out
                    except ResponseError as exc:
                        out.error = f"answer does not fit the response mapping: {exc}"
            else:
                out.error = f"HTTP {status}: {_snippet(raw)}"
                retryable = status == 429 or status >= 500
            out.error = redact(out.error, secrets)
            if not retryable or attempt == self.retries:
                return out
            wait = backoff_delay(attempt, self.backoff, self.max_backoff, rng)
            if retry_after is not None:
                wait = max(wait, min(retry_after, self.max_retry_after))
            await asyncio.sleep(wait)
        return out


def _template(value: Any, key: str) -> Any:
    """A body/params template from --set (already a mapping or list) or a JSON string. An unquoted ``{query}``
    read by YAML (``--set params.q={query}`` gives ``{"query": None}``) is taken back as the placeholder."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise ConfigError(f"{key}: {value!r} is not JSON; e.g. --set '{key}={{\"q\": \"{{query}}\", "
                              f"\"size\": \"{{k}}\"}}'") from None
    return _placeholders_back(value)


def _placeholders_back(value: Any) -> Any:
    if isinstance(value, Mapping):
        if len(value) == 1 and next(iter(value.values())) is None and next(iter(value)) in ("query", "k", "query_id"):
            return "{" + str(next(iter(value))) + "}"
        return {str(k): _placeholders_back(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_placeholders_back(v) for v in value]
    return value


def _snippet(raw: bytes, limit: int = 200) -> str:
    text = raw.decode("utf-8", errors="replace").strip().replace("\n", " ")
    return (text[:limit] + "...") if len(text) > limit else (text or "(empty body)")


def _run_coroutine(make):
    """``asyncio.run(make())`` here, or in a worker thread when this thread already runs an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(make())
    box: dict = {}

    def target():
        try:
            box["value"] = asyncio.run(make())
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = exc

    t = threading.Thread(target=target, name="lab-http-search")
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["value"]
