"""Low-level reading shared by the data readers: bytes (gzip-aware), UTF-8 text, JSON Lines, ids.

Conventions
- A file named ``*.gz`` is decompressed transparently; any other file is read as is.
- Text is UTF-8 (a leading byte-order mark is dropped); CRLF and LF line ends are the same.
- Lines are numbered from 1 as in an editor; blank lines are skipped but still counted.
- Every failure is a :class:`lab.core.errors.DataError` naming the file, the line and the field.
"""
from __future__ import annotations

import gzip
import zlib
from pathlib import Path
from typing import Any, Callable, Iterator

from lab.core.errors import DataError

try:  # orjson is several times faster than json on JSON Lines; json is the fallback
    import orjson as _orjson

    json_loads: Callable[[str | bytes], Any] = _orjson.loads
    JSONError: type[Exception] = _orjson.JSONDecodeError
except ImportError:  # pragma: no cover - orjson is installed in the project venv
    import json as _json

    json_loads = _json.loads
    JSONError = ValueError


class DataWarning(UserWarning):
    """A problem in the input that the reader worked around (counted, and named in the message)."""


def read_bytes(path: Path | str, what: str = "file", hint: str = "") -> bytes:
    """All bytes of ``path``, decompressed when the name ends in ``.gz``; DataError when missing or corrupt."""
    path = Path(path)
    if not path.is_file():
        raise DataError(path, f"{what} not found", hint=hint or "check the path")
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as fh:
                return fh.read()
        return path.read_bytes()
    except (OSError, EOFError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
        raise DataError(path, f"cannot read {what}: {exc}",
                        hint="the file is damaged or not gzip; re-download or re-compress it") from None


def decode(path: Path | str, data: bytes) -> str:
    """``data`` as UTF-8 text without a byte-order mark; a DataError names the line of the first bad byte."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise DataError(path, f"not valid UTF-8: byte 0x{data[exc.start]:02x} at column {column}", line=line,
                        hint="re-encode the file as UTF-8, e.g. `iconv -f latin1 -t utf-8 IN > OUT`") from None
    return text[1:] if text.startswith("\ufeff") else text


def read_text(path: Path | str, what: str = "file", hint: str = "") -> str:
    """The file's text (see :func:`read_bytes` and :func:`decode`)."""
    return decode(path, read_bytes(path, what, hint))


def numbered_lines(path: Path | str, text: str, what: str = "file") -> list[tuple[int, str]]:
    """(line number, line) for each non-blank line, line ends stripped; DataError when there is none."""
    lines = [(i, line.rstrip("\r")) for i, line in enumerate(text.split("\n"), 1) if line.strip()]
    if not lines:
        raise DataError(path, f"{what} is empty", hint="the file has no lines; write it again or remove it")
    return lines


def parse_json_object(path: Path | str, line_no: int, line: str) -> dict[str, Any]:
    """One JSON Lines record: a JSON object, else a DataError naming the line."""
    try:
        obj = json_loads(line)
    except JSONError as exc:
        raise DataError(path, f"malformed JSON: {exc}", line=line_no,
                        hint="each line must hold exactly one JSON object (JSON Lines)") from None
    if not isinstance(obj, dict):
        raise DataError(path, f"expected a JSON object, got {type(obj).__name__}", line=line_no,
                        hint="each line must hold exactly one JSON object (JSON Lines)")
    return obj


def iter_jsonl(path: Path | str, what: str = "file", hint: str = "") -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for each record of a JSON Lines file (``.gz`` allowed)."""
    text = read_text(path, what, hint)
    for line_no, line in numbered_lines(path, text, what):
        yield line_no, parse_json_object(path, line_no, line)


def as_id(path: Path | str, line_no: int | None, value: Any, field: str) -> str:
    """An id as a non-empty string; JSON integers become their decimal text, anything else is an error."""
    if isinstance(value, str):
        if value.strip():
            return value
        raise DataError(path, "empty id", line=line_no, field=field, hint="give every record a non-empty id")
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if value is None:
        raise DataError(path, "missing id", line=line_no, field=field, hint=f"every record needs a string '{field}'")
    raise DataError(path, f"id must be a string, got {type(value).__name__} {value!r}", line=line_no, field=field,
                    hint="write ids as JSON strings")


def as_text(path: Path | str, line_no: int, obj: dict[str, Any], field: str, required: bool = True) -> str:
    """A string field; absent or null gives "" when optional, anything not a string is an error."""
    value = obj.get(field)
    if isinstance(value, str):
        return value
    if value is None and not required:
        return ""
    if value is None:
        raise DataError(path, "missing text" if field not in obj else "text is null", line=line_no, field=field,
                        hint=f"every record needs a string '{field}' (it may be empty)")
    raise DataError(path, f"must be a string, got {type(value).__name__}", line=line_no, field=field,
                    hint=f"write '{field}' as a JSON string")


def as_int(path: Path | str, line_no: int, value: str, field: str, hint: str = "") -> int:
    """A decimal integer written as text ("1", "-1"); "1.0", "", "one" are errors."""
    token = value.strip()
    body = token[1:] if token[:1] in "+-" else token
    if not body.isdigit() or not body.isascii():
        raise DataError(path, f"not an integer: {value!r}", line=line_no, field=field, hint=hint)
    return int(token)
