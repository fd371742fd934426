"""Errors that name the file, line and field, so a user can fix the input without a traceback."""
from __future__ import annotations


class LabError(Exception):
    """Base error of raglab: printed by the CLI as one line, without a traceback; exit status ``exit_code``."""

    exit_code = 2  # bad input


class DataError(LabError):
    def __init__(self, path: object, message: str, line: int | None = None, field: str | None = None, hint: str = ""
                 ) -> None:
        self.path, self.line, self.field, self.message, self.hint = str(path), line, field, message, hint
        where = self.path + (f", line {line}" if line is not None else "") + (f", field '{field}'" if field else "")
        super().__init__(f"{where}: {message}" + (f" ({hint})" if hint else ""))


class ConfigError(LabError):
    pass


class UnknownSplitError(ConfigError, KeyError):
    """A dataset has no qrels for the split asked for: a ConfigError (one line, exit 2) that is also a KeyError,
    so code that looks splits up like a mapping keeps working."""

    __str__ = Exception.__str__  # the message as it is (KeyError would quote it)


class TrackingError(LabError):
    """Logging to MLflow failed after the result was computed; the message says where the result was saved.
    Not a user error: the CLI exits 1."""

    exit_code = 1
