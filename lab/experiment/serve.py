"""A reference retrieval service: one of our own strategies served over HTTP, for the ``http`` strategy
(:mod:`lab.retrievers.http`) to be tested, benchmarked and demonstrated against a real server.

- :func:`make_app`: an aiohttp app answering ``/retrieve`` (POST JSON ``{"query", "k"}`` or GET ``?query=&k=``)
  with ``{"hits": [{"id", "score"}]}``, the response shape the ``http`` strategy reads by default, plus ``/health``.
- :class:`StrategyServer`: any aiohttp app on 127.0.0.1 (a free port by default) in a background thread.
- ``python -m lab.experiment.serve --dataset data/ord-qa --strategy bm25 --port 8765``: :func:`main`, a server
  in its own process (used by benchmarks/http_concurrency.py).
"""
from __future__ import annotations

import argparse
import asyncio
import os
import sys
import threading
import time

from lab.core.errors import LabError
from lab.core.net import exposure_warning
from lab.data.types import Corpus
from lab.experiment.run import load
from lab.retrievers.base import Context, build


def make_app(retriever, *, token: str | None = None, delay_s: float = 0.0, with_text: bool = False,
             corpus: Corpus | None = None):
    """An aiohttp app serving ``retriever`` (already indexed) at ``/retrieve``: POST ``{"query", "k"}`` or GET
    ``?query=&k=`` -> ``{"hits": [{"id", "score"[, "text"]}]}`` (scores as JSON floats, exact), plus ``/health``.
    ``token``: requests need ``Authorization: Bearer <token>`` (else 401). ``delay_s``: sleep before answering
    (a stand-in for network and model time in benchmarks). ``with_text``: add each hit's text (needs corpus)."""
    from aiohttp import web

    def hits_of(text: str, k: int) -> list[tuple[str, float]]:
        return list(retriever.search_one(text, k))

    async def retrieve(request):
        if token is not None and request.headers.get("Authorization") != f"Bearer {token}":
            return web.json_response({"error": "unauthorized"}, status=401)
        if request.method == "GET":
            text, k = request.query.get("query", ""), int(request.query.get("k", 10))
        else:
            data = await request.json()
            text, k = str(data.get("query", "")), int(data.get("k", 10))
        if delay_s:
            await asyncio.sleep(delay_s)
        hits = [{"id": d, "score": float(s)} for d, s in hits_of(text, k)]
        if with_text and corpus is not None:
            for h in hits:
                h["text"] = corpus[h["id"]].text
        return web.json_response({"hits": hits})

    async def health(request):
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_route("POST", "/retrieve", retrieve)
    app.router.add_route("GET", "/retrieve", retrieve)
    app.router.add_get("/health", health)
    return app


class StrategyServer:
    """An aiohttp app on 127.0.0.1 (a free port) in a background thread: ``with StrategyServer(app) as s:
    s.url("/retrieve")``. Used by tests, the benchmark and :func:`main`."""

    def __init__(self, app, host: str = "127.0.0.1", port: int = 0):
        self.app, self.host, self.port = app, host, port
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._serve, daemon=True, name="lab-strategy-server")

    def url(self, path: str = "/retrieve") -> str:
        return f"http://{self.host}:{self.port}{path}"

    def _serve(self):
        from aiohttp import web

        asyncio.set_event_loop(self._loop)
        try:
            self._runner = web.AppRunner(self.app, access_log=None)
            self._loop.run_until_complete(self._runner.setup())
            site = web.TCPSite(self._runner, self.host, self.port)
            self._loop.run_until_complete(site.start())
            self.port = self._runner.addresses[0][1]
        except BaseException as exc:  # noqa: BLE001 - reported by start()
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        self._loop.run_forever()
        self._loop.run_until_complete(self._runner.cleanup())
        self._loop.close()

    def start(self) -> "StrategyServer":
        self._thread.start()
        if not self._ready.wait(30) or self._error is not None:
            raise LabError(f"server on {self.host}:{self.port} did not start: {self._error}")
        return self

    def stop(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def main(argv: list[str] | None = None) -> int:
    """``python -m lab.experiment.serve --dataset D --strategy bm25 [--port P] [--delay-ms MS]``: serve one of our
    strategies over HTTP (a reference service to point ``--strategy http`` at). Token from ``--token-env VAR``."""
    p = argparse.ArgumentParser(prog="python -m lab.experiment.serve", description=main.__doc__)
    p.add_argument("--dataset", required=True)
    p.add_argument("--strategy", default="bm25")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8765)
    p.add_argument("--delay-ms", type=float, default=0.0, help="sleep before each answer (simulated service time)")
    p.add_argument("--with-text", action="store_true", help="add each hit's text to the answer")
    p.add_argument("--token-env", help="require Authorization: Bearer $VAR")
    args = p.parse_args(argv)
    what = (f"the retrieval service ({args.strategy} over the corpus of {args.dataset}"
            + (", with document texts" if args.with_text else "") + ")")
    warning = exposure_warning(args.host, args.port, what)
    if warning and not args.token_env:  # an open service on the network: refused before any work
        p.exit(2, f"error: --host {args.host} is not a loopback address and --token-env is not given: {what} would "
                  "answer anyone on the network; pass --token-env VAR (requests then need Authorization: Bearer "
                  "$VAR) or bind 127.0.0.1\n")
    if args.token_env and not os.environ.get(args.token_env):
        p.exit(2, f"error: --token-env {args.token_env}: that environment variable is not set or empty\n")
    if warning:
        print(warning, file=sys.stderr, flush=True)
    ds = load(args.dataset, progress=False)
    retriever = build(args.strategy, {}, Context(progress=False))
    retriever.index(ds.corpus)
    token = os.environ[args.token_env] if args.token_env else None  # checked above
    server = StrategyServer(make_app(retriever, token=token, delay_s=args.delay_ms / 1000, with_text=args.with_text,
                                     corpus=ds.corpus), args.host, args.port).start()
    print(f"serving {args.strategy} over {ds.name} at {server.url()}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
