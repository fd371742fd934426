"""lab.core.net: retry waits, Retry-After, headers from the environment, redaction, loopback hosts."""
from __future__ import annotations

import random

import pytest

from lab.core.errors import ConfigError
from lab.core.net import backoff_delay, exposure_warning, is_loopback, parse_retry_after, redact, resolve_headers

SECRET = "tok-SECRET-6c1f0e9a7b"


def test_backoff_is_exponential_capped_and_seeded():
    a = [backoff_delay(i, 1.0, 8.0, rng) for rng in [random.Random(7)] for i in range(6)]
    b = [backoff_delay(i, 1.0, 8.0, rng) for rng in [random.Random(7)] for i in range(6)]
    assert a == b
    for i, d in enumerate(a):
        nominal = min(8.0, 2.0 ** i)
        assert 0.5 * nominal <= d < 1.5 * nominal


def test_parse_retry_after():
    assert parse_retry_after({"retry-after": "3"}) == 3.0
    assert parse_retry_after({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert parse_retry_after({}) is None
    assert parse_retry_after({"retry-after": "Wed, 21 Oct 2015 07:28:10 GMT"}, now=1445412480.0) == 10.0
    assert parse_retry_after({"retry-after": "soon"}) is None


def test_headers_from_environment_and_redaction():
    env = {"TOK": SECRET, "USER_KEY": "k-123456"}
    assert resolve_headers({"Authorization": "TOK"}, env) == {"Authorization": SECRET}
    assert resolve_headers({"Authorization": "Bearer ${TOK}", "X-Key": "$USER_KEY"}, env) == {
        "Authorization": f"Bearer {SECRET}", "X-Key": "k-123456"}
    with pytest.raises(ConfigError, match="MISSING_VAR is not set") as err:
        resolve_headers({"Authorization": "Bearer $MISSING_VAR"}, env)
    assert SECRET not in str(err.value)
    assert redact(f"got Bearer {SECRET} and {SECRET}", [f"Bearer {SECRET}"]) == "got *** and ***"


def test_loopback_hosts():
    assert all(is_loopback(h) for h in ("127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "10.1.2.3", "192.168.0.1", "no-such-host.invalid"))
    assert exposure_warning("127.0.0.1", 5000, "x") is None
    assert "x on port 5000 can be reached from other machines" in exposure_warning("0.0.0.0", 5000, "x")
