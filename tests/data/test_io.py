"""lab.data.io: gzip-aware bytes, UTF-8 text, numbered JSON Lines and ids, each failure a DataError naming file,
line and field."""
from __future__ import annotations

import gzip

import pytest

from lab.core.errors import DataError
from lab.data.io import (
    as_id,
    as_int,
    as_text,
    decode,
    iter_jsonl,
    numbered_lines,
    parse_json_object,
    read_bytes,
    read_text,
)


def test_read_bytes_decompresses_gz_and_reads_other_files_as_they_are(tmp_path):
    (tmp_path / "a.jsonl.gz").write_bytes(gzip.compress(b"zipped"))
    (tmp_path / "b.txt").write_bytes(b"plain")
    assert read_bytes(tmp_path / "a.jsonl.gz") == b"zipped" and read_bytes(tmp_path / "b.txt") == b"plain"


def test_a_missing_or_damaged_file_is_a_data_error_naming_it(tmp_path):
    with pytest.raises(DataError, match=r"corpus.jsonl: corpus file not found \(check the path\)"):
        read_bytes(tmp_path / "corpus.jsonl", "corpus file")
    (tmp_path / "bad.gz").write_bytes(b"not gzip at all")
    with pytest.raises(DataError, match=r"bad.gz: cannot read file: .*re-download or re-compress"):
        read_bytes(tmp_path / "bad.gz")


def test_decode_drops_a_byte_order_mark_and_names_line_and_column_of_a_bad_byte():
    assert decode("f", "\ufeffhé".encode("utf-8")) == "hé"
    with pytest.raises(DataError) as exc:
        decode("f.tsv", b"ok\nab\xe9c\n")
    assert exc.value.line == 2 and "byte 0xe9 at column 3" in str(exc.value)


def test_numbered_lines_count_blank_lines_and_crlf_like_an_editor(tmp_path):
    assert numbered_lines("f", "a\r\n\r\nb\n") == [(1, "a"), (3, "b")]
    with pytest.raises(DataError, match="f: queries file is empty"):
        numbered_lines("f", "\n \n", "queries file")


def test_iter_jsonl_yields_line_numbers_and_objects(tmp_path):
    path = tmp_path / "q.jsonl"
    path.write_text('{"_id": "1"}\n\n{"_id": "2", "x": [1]}\n', encoding="utf-8")
    assert list(iter_jsonl(path)) == [(1, {"_id": "1"}), (3, {"_id": "2", "x": [1]})]


@pytest.mark.parametrize("line, message", [("{bad", "malformed JSON"), ("[1, 2]", "expected a JSON object, got list")])
def test_a_record_that_is_no_json_object_names_its_line(line, message):
    with pytest.raises(DataError, match=message) as exc:
        parse_json_object("f.jsonl", 7, line)
    assert exc.value.line == 7


def test_as_id_takes_strings_and_json_integers_only():
    assert as_id("f", 1, "d1", "_id") == "d1" and as_id("f", 1, 42, "_id") == "42"
    for value, message in ((" ", "empty id"), (None, "missing id"), (True, "id must be a string, got bool"),
                           (1.5, "id must be a string, got float")):
        with pytest.raises(DataError, match=message) as exc:
            as_id("f", 2, value, "_id")
        assert exc.value.field == "_id" and exc.value.line == 2


def test_as_text_optional_fields_default_to_empty_and_non_strings_are_errors():
    assert as_text("f", 1, {"text": "t"}, "text") == "t"
    assert as_text("f", 1, {}, "title", required=False) == "" and as_text("f", 1, {"title": None}, "title", False) == ""
    with pytest.raises(DataError, match="missing text"):
        as_text("f", 1, {}, "text")
    with pytest.raises(DataError, match="text is null"):
        as_text("f", 1, {"text": None}, "text")
    with pytest.raises(DataError, match="must be a string, got int"):
        as_text("f", 1, {"title": 3}, "title", required=False)


def test_as_int_accepts_signed_decimal_text_only():
    assert [as_int("f", 1, text, "grade") for text in (" 3 ", "-1", "+2")] == [3, -1, 2]
    for bad in ("1.0", "", "one", "١"):  # the last: an Arabic-Indic digit, a digit to str.isdigit but not ASCII
        with pytest.raises(DataError, match="not an integer"):
            as_int("f", 1, bad, "grade")


def test_read_text_is_read_bytes_then_decode(tmp_path):
    (tmp_path / "t.txt.gz").write_bytes(gzip.compress("\ufeffline\n".encode("utf-8")))
    assert read_text(tmp_path / "t.txt.gz") == "line\n"
