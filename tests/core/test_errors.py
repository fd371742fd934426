"""lab.core.errors: one line naming file, line and field; the exit status each error kind asks for."""
from __future__ import annotations

from pathlib import Path

import pytest

from lab.core.errors import ConfigError, DataError, LabError, TrackingError, UnknownSplitError


def test_data_error_names_file_line_field_and_hint_in_one_line():
    exc = DataError(Path("data/x/corpus.jsonl"), "missing text", line=3, field="text", hint="add a text")
    assert str(exc) == "data/x/corpus.jsonl, line 3, field 'text': missing text (add a text)"
    assert (exc.path, exc.line, exc.field, exc.message, exc.hint) == ("data/x/corpus.jsonl", 3, "text",
                                                                     "missing text", "add a text")
    assert "\n" not in str(exc)


def test_data_error_leaves_out_what_it_was_not_given():
    assert str(DataError("f.tsv", "empty")) == "f.tsv: empty"
    assert str(DataError("f.tsv", "bad", line=0)) == "f.tsv, line 0: bad"  # line 0 is still a line
    assert str(DataError("f.tsv", "bad", field="score")) == "f.tsv, field 'score': bad"


def test_exit_codes_bad_input_2_tracking_1():
    assert DataError("f", "m").exit_code == ConfigError("m").exit_code == LabError("m").exit_code == 2
    assert TrackingError("logging failed; result saved in x").exit_code == 1


def test_unknown_split_is_a_config_error_and_a_key_error_printed_unquoted():
    exc = UnknownSplitError("data/x: no qrels for split 'dev'")
    assert isinstance(exc, ConfigError) and isinstance(exc, KeyError)
    assert str(exc) == "data/x: no qrels for split 'dev'"  # KeyError alone would print it in quotes
    with pytest.raises(KeyError):
        raise exc
