"""lab.text.chunking.chunks: a chunk id names its span, and parse_chunk_id, the one parser of span ids, reads it back
(the last ``@`` splits, so a document id may hold ``@``); a plain document id is no chunk id."""
from __future__ import annotations

import pytest

from lab.metrics.tokens import chunk_span
from lab.text.chunking import Chunk, chunk_id, doc_id_of, parse_chunk_id


@pytest.mark.parametrize("doc, start, end", [("d1", 0, 5), ("a@b", 12, 40), ("中文", 3, 3), ("x-1@2", 7, 9)])
def test_a_chunk_id_is_parsed_back_to_its_span(doc, start, end):
    cid = chunk_id(doc, start, end)
    assert cid == f"{doc}@{start}-{end}"
    assert parse_chunk_id(cid) == (doc, start, end) and doc_id_of(cid) == doc
    assert chunk_span(cid) == (doc, start, end)  # the token metrics read ids through the same parser


@pytest.mark.parametrize("cid", ["d1", "d1@", "d1@5", "d1@a-b", "d1@1-", "d1@-2", "d1@1-2-3", "d1@ 1-2"])
def test_what_is_not_a_chunk_id(cid):
    assert parse_chunk_id(cid) is None
    with pytest.raises(ValueError, match="is not a chunk id"):
        doc_id_of(cid)
    assert chunk_span(cid, {cid: 7}) == (cid, 0, 7)  # a plain document id spans the whole document


def test_the_body_is_the_text_without_its_prefix():
    c = Chunk("d@0-5", "d", 0, 5, "Title\nHello", prefix="Title\n")
    assert c.body == "Hello" and c.text.endswith(c.body)
