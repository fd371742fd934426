"""lab.testset.passages: windows over the whole text, by section (ingest's metadata.headings, else markdown
headings, else none), cut at boundaries, exact slices of the text."""
from __future__ import annotations

from lab.data.types import Document
from lab.testset.passages import corpus_passages, headings, looks_like_id, not_prose, passage_windows, sections

BODY = " ".join(f"Sentence {i} explains one more detail of the placer." for i in range(60))  # ~3,200 chars


def _check_cover(doc: Document, passages, max_chars: int):
    text = doc.text
    assert all(p.text == text[p.start:p.end] and len(p.text) <= max_chars for p in passages)
    assert all(a.end <= b.start for a, b in zip(passages, passages[1:], strict=False))  # in order, no overlap
    covered = "".join(text[a.end:b.start] for a, b in zip(passages, passages[1:], strict=False))
    assert not covered.strip()  # only whitespace between consecutive windows: the whole text is covered
    for p in passages:  # never inside a word
        assert p.start == 0 or not (text[p.start - 1].isalnum() and text[p.start].isalnum())
        assert p.end == len(text) or not (text[p.end - 1].isalnum() and text[p.end].isalnum())


def test_windows_cover_the_whole_text_without_headings():
    doc = Document("d", BODY)
    got, dropped = passage_windows(doc, max_chars=1000)
    assert len(got) == 4 and dropped == 0 and got[-1].end == len(BODY) and {p.section for p in got} == {""}
    _check_cover(doc, got, 1000)
    assert all(p.text.endswith(".") for p in got)  # cut at sentence ends


def test_sections_from_ingest_headings_metadata():
    text = "Intro words here.\n\nInstall\n\n" + BODY[:600] + "\n\nUsage\n\n" + BODY[:1500]
    heads = [{"level": 1, "title": "Install", "start": text.index("Install"), "end": text.index("Install") + 7},
             {"level": 1, "title": "Usage", "start": text.index("Usage"), "end": text.index("Usage") + 5}]
    doc = Document("guide", text, metadata={"headings": heads})
    assert headings(doc) == [(text.index("Install"), "Install"), (text.index("Usage"), "Usage")]
    assert [s[2] for s in sections(doc)] == ["", "Install", "Usage"]
    got, dropped = passage_windows(doc, max_chars=1000, min_words=10)
    assert dropped == 1  # "Intro words here." is too short
    assert [p.section for p in got] == ["Install", "Usage", "Usage"] and got[1].text.startswith("Usage")
    _check_cover(doc, got, 1000)
    # a list form [offset, level, title] works too
    doc2 = Document("g", text, metadata={"headings": [[h["start"], 1, h["title"]] for h in heads]})
    assert headings(doc2) == headings(doc)


def test_markdown_headings_when_no_metadata_and_chunks_ignore_document_offsets():
    text = "# Title\n\n" + BODY[:300] + "\n\n## Part two\n\n" + BODY[:300]
    doc = Document("md", text)
    assert [t for _, t in headings(doc)] == ["Title", "Part two"]
    chunk = Document("md@5-50", text, metadata={"start": 5, "headings": [{"start": 3, "title": "x"}]})
    assert [t for _, t in headings(chunk)] == ["Title", "Part two"]  # document offsets are not the chunk's


def test_chinese_text_is_cut_and_counted_by_characters():
    text = "安装说明\n\n" + "这个命令用于设置时钟网络的线电阻和电容。" * 80
    got, _ = passage_windows(Document("zh", text), max_chars=300, min_words=20)
    assert len(got) >= 5 and all(len(p.text) <= 300 for p in got) and got[1].text.endswith("。")
    passages, dropped = corpus_passages([Document("a", BODY), Document("b", "")], 1000)
    assert {p.unit_id for p in passages} == {"a"} and dropped == 0


def test_windows_that_are_not_prose_are_named_by_reason():
    """The passage the SQLite trial sent to the LLM (tagline and table of contents), a code listing, requirement
    ids and a run of headings are not prose; documentation prose (hard-wrapped, with a markdown link) is."""
    tagline_toc = ("Small. Fast. Reliable.\nChoose any three.\n\nTable Of Contents\n\n1. Overview\n2. Features\n"
                   "3. Compiling\n4. Interfaces\n5. Limits\n6. Ticket [4c86b126f2]")
    code = "```c\nint rc = sqlite3_open(path, &db);\nif (rc != SQLITE_OK) {\n  return rc;\n}\n```\n\nReturns rc."
    ids = "R-04042-24825-31546 R-11111-22222-33333 R-51234-55555-99999 shall hold. R-44444-55555-66666"
    heads = "## Overview\n\n## Features\n\n### Compiling the amalgamation\n\n## Interfaces"
    prose = ("[OpenROAD](https://theopenroadproject.org/) eliminates the barriers\nof cost, schedule risk and "
             "uncertainty in hardware design.\n\nThe `set_wire_rc` command sets the resistance and capacitance used "
             "to estimate the delay of routing wires.")
    assert [not_prose(t) for t in (tagline_toc, code, ids, heads, prose)] == ["boilerplate", "code", "ids",
                                                                              "headings", None]
    assert looks_like_id("R-04042-24825") and looks_like_id("4c86b126f2") and not looks_like_id("sqlite3_open")


def test_a_syntax_page_of_names_is_not_prose_but_api_prose_full_of_names_is():
    """Qwen's SQLite set drew 3 of its 10 bad questions from syntax pages (docs/grades/qwen-sqlite-
    questionfirst.jsonl): a diagram's name, then lists of other names. Colons end no sentence there; the
    tokens are names, not words. A C-API paragraph that names several functions is still prose."""
    syntax = ("compound-operator\n\nUsed by: factored-select-stmt select-stmt\nSee also: lang_aggfunc.html "
              "lang_altertable.html lang_attach.html lang_createindex.html lang_createtable.html")
    stub = ("insert-stmt\n\nUsed by: create-trigger-stmt sql-stmt\nReferences: common-table-expression expr "
            "returning-clause select-stmt upsert-clause\nSee also: lang_createtrigger.html lang_insert.html")
    api = ("In the call sqlite3_vtab_config(D,C,...) the D parameter is the database connection in which the "
           "virtual table is being created and which is passed in as the first argument to the xConnect or "
           "xCreate method that is invoking sqlite3_vtab_config().")
    chinese = "《中华人民共和国刑法》规定，故意杀人的，处死刑、无期徒刑或者十年以上有期徒刑。"
    assert [not_prose(t) for t in (syntax, stub, api, chinese)] == ["boilerplate", "boilerplate", None, None]
