"""The grading page of ``lab testset grade``: one self-contained HTML page and a small JSON API on 127.0.0.1.

Conventions
- Standard library only (``http.server``, one thread per request, a lock around the sheet), listening on
  127.0.0.1; the port is the one asked for or a free one the system picks. A random token (``secrets``) is part
  of the printed URL; every request without it is answered 403, so another local user or a web page cannot read or
  write the sheet.
- The page (``lab/resources/grading.html``) holds its CSS and script inline and loads nothing else.
- API (every path takes ``?token=``): ``GET /`` the page; ``GET /api/status`` totals, pace, the scale and the next
  ungraded position; ``GET /api/row?pos=N`` what the page shows of row N (lab.testset.grading.Grading.view);
  ``POST /api/grade`` {pos, value, fixed_question?} and ``POST /api/note`` {pos, note} write the sheet at once and
  answer the new status. A bad request gets 400 with {"error": one line}.
"""
from __future__ import annotations

import json
import secrets
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

from lab.core.errors import ConfigError, LabError
from lab.testset.grading import Grading

PAGE = Path(__file__).resolve().parents[1] / "resources" / "grading.html"
HOST = "127.0.0.1"
#: Largest request body read (a note or a corrected question), in bytes.
MAX_BODY = 64 * 1024


@dataclass
class GradingServer:
    """A started server: ``url`` (with the token) and the ``httpd`` to serve or close."""

    httpd: ThreadingHTTPServer
    url: str
    token: str

    def serve_forever(self) -> None:
        self.httpd.serve_forever()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _handler(grading: Grading, token: str, page: bytes, lock: threading.Lock):
    class Handler(BaseHTTPRequestHandler):
        server_version = "raglab-grade"

        def log_message(self, format, *args):  # noqa: A002 - quiet: the terminal shows the URL only
            pass

        def _send(self, code: int, body: bytes, ctype: str = "application/json") -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.send_header("X-Content-Type-Options", "nosniff")
            self.send_header("Content-Security-Policy", "default-src 'self'; style-src 'unsafe-inline'; "
                                                        "script-src 'unsafe-inline'; connect-src 'self'")
            self.end_headers()
            self.wfile.write(body)

        def _json(self, code: int, obj) -> None:
            self._send(code, json.dumps(obj, ensure_ascii=False).encode("utf-8"))

        def _authorised(self, query: dict) -> bool:
            given = (query.get("token") or [""])[0]
            if secrets.compare_digest(given.encode(), token.encode()):
                return True
            self._json(403, {"error": "wrong or missing token: open the URL `lab testset grade` printed"})
            return False

        def do_GET(self):  # noqa: N802 - http.server's name
            url = urlparse(self.path)
            query = parse_qs(url.query)
            if not self._authorised(query):
                return
            try:
                if url.path == "/":
                    self._send(200, page, "text/html; charset=utf-8")
                elif url.path == "/api/status":
                    with lock:
                        self._json(200, grading.status())
                elif url.path == "/api/row":
                    pos = int((query.get("pos") or ["0"])[0])
                    with lock:
                        self._json(200, grading.view(pos))
                else:
                    self._json(404, {"error": f"no such path {url.path}"})
            except (ValueError, LabError) as exc:
                self._json(400, {"error": str(exc)})

        def do_POST(self):  # noqa: N802
            url = urlparse(self.path)
            if not self._authorised(parse_qs(url.query)):
                return
            try:
                n = int(self.headers.get("Content-Length") or 0)
                if not 0 <= n <= MAX_BODY:
                    raise ConfigError(f"request body of {n} bytes: at most {MAX_BODY}")
                body = json.loads(self.rfile.read(n) or b"{}")
                pos = int(body.get("pos"))
                with lock:
                    if url.path == "/api/grade":
                        grading.grade(pos, str(body.get("value", "")), time.time(),
                                      fixed_question=body.get("fixed_question"))
                    elif url.path == "/api/note":
                        grading.note(pos, str(body.get("note", ""))[:4000])
                    else:
                        self._json(404, {"error": f"no such path {url.path}"})
                        return
                    self._json(200, grading.status())
            except (ValueError, TypeError, LabError) as exc:
                self._json(400, {"error": str(exc)})

    return Handler


def start_server(grading: Grading, port: int = 0, token: str | None = None) -> GradingServer:
    """Bind 127.0.0.1:``port`` (0: a free one) and return the server (not yet serving); a busy port is a one-line
    error."""
    token = token or secrets.token_urlsafe(16)
    page = PAGE.read_bytes()
    try:
        httpd = ThreadingHTTPServer((HOST, port), _handler(grading, token, page, threading.Lock()))
    except OSError as exc:
        raise ConfigError(f"--port {port}: cannot listen on {HOST}:{port} ({exc.strerror or exc}); pass another "
                          "--port, or omit it for a free one") from None
    httpd.daemon_threads = True
    return GradingServer(httpd, f"http://{HOST}:{httpd.server_address[1]}/?token={token}", token)
