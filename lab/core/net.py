"""Network helpers shared by the HTTP clients of raglab (the ``http`` strategy, OpenAI-compatible LLM endpoints,
the Pushgateway publisher): retry waits, and URLs and headers that keep secrets out of logs.

Conventions
- Retry waits (:func:`backoff_delay`): exponential backoff with jitter, ``min(cap, base * 2**n)`` times a factor
  drawn uniformly from [0.5, 1.5) by a caller-seeded ``random.Random`` (so waits are reproducible); see "Exponential
  Backoff And Jitter", AWS Architecture Blog, 2015.
- ``Retry-After`` (:func:`parse_retry_after`): delta seconds or an HTTP date (RFC 9110, section 10.2.3), plus the
  ``retry-after-ms`` header OpenAI-compatible servers send; the millisecond header wins when both are present.
- Secrets: header values come from environment variables only (:func:`resolve_headers`); :func:`redact` masks them
  in any text before it is shown or logged; :func:`public_url` refuses credentials in a URL (userinfo, or a query
  parameter named like a key or token) and drops the query string, since URLs are logged with configs.
- Exposure (:func:`is_loopback`, :func:`exposure_warning`): a server raglab starts binds 127.0.0.1 unless told
  otherwise; any other ``--host`` (``0.0.0.0``, ``::``, a LAN address, a name that does not resolve to loopback
  only) gets a warning naming what becomes reachable from other machines.
"""
from __future__ import annotations

import email.utils
import ipaddress
import os
import random
import re
import socket
import time
from datetime import datetime, timezone
from typing import Iterable, Mapping
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from lab.core.errors import ConfigError

_SECRET_PARAM = re.compile(r"key|token|secret|passw|auth|signature|credential", re.IGNORECASE)
_ENV_REF = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


def backoff_delay(attempt: int, base: float, cap: float, rng: random.Random) -> float:
    """Seconds to wait before retry number ``attempt`` (0-based): ``min(cap, base * 2**attempt)`` times a
    jitter factor drawn uniformly from [0.5, 1.5) by ``rng`` (seeded by the caller, so waits are reproducible)."""
    return float(min(cap, base * (2 ** attempt)) * (0.5 + rng.random()))


def parse_retry_after(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """Seconds asked for by ``retry-after-ms`` or ``Retry-After`` (delta seconds or an HTTP date); None if absent
    or unreadable; never negative."""
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    now_dt = datetime.fromtimestamp(time.time() if now is None else now, tz=timezone.utc)
    return max(0.0, (when - now_dt).total_seconds())


def env_names(spec: str) -> list[str]:
    """The environment variables a ``headers_env`` value names: ``API_TOKEN`` (the whole value) or each
    ``$VAR`` / ``${VAR}`` of ``Bearer $API_TOKEN``."""
    return [a or b for a, b in _ENV_REF.findall(spec)] or [spec.strip()]


def resolve_headers(headers_env: Mapping[str, str] | None, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Header values from environment variables: ``{"Authorization": "API_TOKEN"}`` (the variable holds the whole
    value) or ``{"Authorization": "Bearer $API_TOKEN"}`` (variables expanded inside the value). A missing
    variable is a ConfigError naming the header and the variable (never a value)."""
    environ = os.environ if environ is None else environ
    out = {}
    for name, spec in (headers_env or {}).items():
        if not isinstance(spec, str) or not spec.strip():
            raise ConfigError(f"headers_env.{name}: give the name of an environment variable, e.g. "
                              f"--set headers_env.{name}=MY_TOKEN_ENV")
        refs = [a or b for a, b in _ENV_REF.findall(spec)]
        for var in env_names(spec):
            if var not in environ:
                raise ConfigError(f"headers_env.{name}: environment variable {var} is not set; export it "
                                  f"(its value is sent as the {name} header and never logged)")
        out[str(name)] = (_ENV_REF.sub(lambda m: environ[m.group(1) or m.group(2)], spec) if refs
                          else environ[spec.strip()])
    return out


def redact(text: str, secrets: Iterable[str | None]) -> str:
    """``text`` with every secret value (and each whitespace-separated part of it longer than 7 characters,
    e.g. the token of "Bearer <token>") replaced by ``***``."""
    parts = set()
    for s in secrets:
        if s:
            parts.add(s)
            parts.update(p for p in str(s).split() if len(p) > 7)
    for p in sorted(parts, key=len, reverse=True):
        text = text.replace(p, "***")
    return text


def public_url(url: str) -> str:
    """``url`` as shown in describe(): scheme, host, port and path (query string dropped). Refuses credentials in
    the URL (user:password@, or a query parameter named like key / token / secret / auth), since the url itself is
    logged with the config: use headers_env."""
    parts = urlsplit(str(url).strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"url {url!r}: expected http(s)://host[:port]/path, e.g. --set url=http://127.0.0.1:8000/retrieve")
    if parts.username or parts.password:
        raise ConfigError("url: credentials in the URL would be logged with the config; pass them as a header "
                          "from the environment instead, e.g. --set headers_env.Authorization=MY_TOKEN_ENV")
    secret = [name for name, _ in parse_qsl(parts.query, keep_blank_values=True) if _SECRET_PARAM.search(name)]
    if secret:
        raise ConfigError(f"url: query parameter {secret[0]!r} looks like a credential and the url is logged with the "
                          "config; send it as a header from the environment (headers_env) instead")
    netloc = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    if parts.port:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def is_loopback(host: str) -> bool:
    """True when ``host`` reaches this machine only: a loopback address (127.0.0.0/8, ::1) or a name that resolves
    to loopback addresses only ("localhost"). Wildcards (``0.0.0.0``, ``::``) and unresolvable names are not."""
    name = host.strip("[]")
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(name, None)
    except (OSError, UnicodeError):
        return False
    return bool(infos) and all(ipaddress.ip_address(str(i[4][0]).split("%")[0]).is_loopback for i in infos)


def exposure_warning(host: str, port: int, what: str) -> str | None:
    """One warning line when ``host`` is not loopback (see the module docstring), naming ``what`` is exposed;
    None on loopback."""
    if is_loopback(host):
        return None
    return (f"warning: --host {host} is not a loopback address: {what} on port {port} can be reached from other "
            "machines on the network; bind 127.0.0.1 (the default) unless that is intended")
