"""lab.testset.query_edits: typos (keyboard neighbours, Chinese homophones), synonyms and distractor clauses on real
queries, and the shipped word lists they draw from."""
from __future__ import annotations

import random

import pytest

from lab.core.errors import ConfigError
from lab.core.paths import resolve_repo_path
from lab.data.beir import load_dataset, read_queries
from lab.testset.perturb import perturb_queries
from lab.testset.query_edits import Resources, edit_distance, keyboard_typo, latin_words, read_table, typo_text

ORD_QA = resolve_repo_path("data/ord-qa")


@pytest.fixture(scope="module")
def res():
    return Resources(cache_dir=resolve_repo_path(".") / ".cache")  # jieba's prefix cache shared with lab.text.tokenize


@pytest.fixture(scope="module")
def scifact_queries():
    return read_queries(resolve_repo_path("data/scifact/queries.jsonl"), progress=False).subset(
        [str(i) for i in range(0, 400)])


@pytest.fixture(scope="module")
def cmrc_queries():
    q = read_queries(resolve_repo_path("data/cmrc2018/queries.jsonl"), progress=False)
    return q.subset(list(q)[:60])


@pytest.fixture(scope="module")
def ordqa():
    return load_dataset(ORD_QA, progress=False)


def _replay(original: str, edits: list[dict]) -> str:
    """The original text with each recorded word edit applied (checks the record says all that changed)."""
    out, pos = [], 0
    for e in sorted(edits, key=lambda e: e["start"]):
        assert original[e["start"]:e["start"] + len(e["before"])] == e["before"]
        out += [original[pos:e["start"]], e["after"]]
        pos = e["start"] + len(e["before"])
    return "".join(out + [original[pos:]])


def test_edit_distance_counts_one_for_each_kind_of_edit():
    assert edit_distance("protein", "protein") == 0
    assert edit_distance("protein", "protien") == 1  # adjacent transposition
    assert edit_distance("protein", "protin") == 1
    assert edit_distance("protein", "proteiin") == 1
    assert edit_distance("protein", "prodein") == 1
    assert edit_distance("abc", "ca") == 3  # optimal string alignment, not unrestricted Damerau (2)
    assert edit_distance("", "ab") == 2


def test_keyboard_typo_keeps_the_first_letter_and_uses_qwerty_neighbours():
    rng = random.Random(1)
    for op in ("swap", "drop", "insert", "replace"):
        for _ in range(50):
            new = keyboard_typo("Receptor", op, rng)
            assert new[0] == "R" and edit_distance("Receptor", new) == 1
    assert keyboard_typo("seee", "swap", rng) == "seee"  # no two different adjacent letters after the first
    new = keyboard_typo("aaaa", "replace", random.Random(0))
    assert new[0] == "a" and set(new) - {"a"} <= set("qwsz")


def test_latin_words_skip_numbers_ids_acronyms_and_code():
    text = "IL-6 and TNF levels rise 20% in set_routing_alpha (PrP) tests, e.g. proteins."
    assert [u.text for u in latin_words(text, 4)] == ["levels", "rise", "tests", "proteins"]


def test_typo_is_deterministic_and_edits_one_letter_per_word(scifact_queries, res):
    a = perturb_queries(scifact_queries, "typo", seed=0, res=res)
    b = perturb_queries(scifact_queries, "typo", seed=0, res=res)
    c = perturb_queries(scifact_queries, "typo", seed=1, res=res)
    assert {q: x.text for q, x in a.items()} == {q: x.text for q, x in b.items()}
    assert sum(a[q].text != c[q].text for q in a) > len(a) / 2
    assert set(a) == set(scifact_queries)
    changed = [x for x in a.values() if x.changed]
    assert len(changed) >= 0.95 * len(a)  # min_one: every query with an eligible word changes
    for x in a.values():
        assert _replay(x.original, x.edits) == x.text
        for e in x.edits:
            assert edit_distance(e["before"], e["after"]) == 1
            assert e["before"][0] == e["after"][0]
            assert e["before"].isalpha() and len(e["before"]) >= 4 and not any(ch.isupper() for ch in e["before"][1:])
    for x in list(a.values())[:40]:  # whole-text distance (quadratic in Python: a sample)
        assert 1 <= edit_distance(x.original, x.text) <= len(x.edits) if x.changed else x.text == x.original


def test_typo_rate_scales_the_number_of_edits(scifact_queries, res):
    low = perturb_queries(scifact_queries, "typo", seed=0, params={"rate": 0.05}, res=res)
    high = perturb_queries(scifact_queries, "typo", seed=0, params={"rate": 0.6}, res=res)
    assert sum(len(x.edits) for x in high.values()) > 3 * sum(len(x.edits) for x in low.values())


def test_chinese_typo_replaces_a_character_with_a_homophone(cmrc_queries, res):
    out = perturb_queries(cmrc_queries, "typo", seed=0, res=res)
    hom = res.homophones()
    assert sum(x.changed for x in out.values()) >= 0.9 * len(out)
    for x in out.values():
        assert len(x.text) == len(x.original)
        assert _replay(x.original, x.edits) == x.text
        for e in x.edits:
            assert e["op"] == "homophone"
            diff = [(a, b) for a, b in zip(e["before"], e["after"], strict=False) if a != b]
            assert len(diff) == 1 and diff[0][1] in hom[diff[0][0]]
        digits = [ch for ch in x.original if ch.isdigit()]
        assert digits == [ch for ch in x.text if ch.isdigit()]


def test_typo_rejects_unknown_ops(res):
    with pytest.raises(ConfigError, match="typo.ops"):
        typo_text("some words here", random.Random(0), res, ops=["smudge"])


def test_english_synonyms_come_from_the_shipped_list(scifact_queries, res):
    out = perturb_queries(scifact_queries, "synonym", seed=0, params={"top": 2}, res=res)
    en = res.synonyms("en")
    changed = [x for x in out.values() if x.changed]
    assert 0.5 * len(out) < len(changed) < len(out)  # coverage: most, not all, SciFact claims have a listed word
    for x in changed:
        assert _replay(x.original, x.edits) == x.text
        for e in x.edits:
            assert e["after"].lower() in en[e["before"].lower()][:2]
            assert e["after"][0].isupper() == e["before"][0].isupper()
    assert out == perturb_queries(scifact_queries, "synonym", seed=0, params={"top": 2}, res=res)


def test_chinese_synonyms_come_from_the_shipped_list(cmrc_queries, res):
    out = perturb_queries(cmrc_queries, "synonym", seed=0, res=res)
    zh = res.synonyms("zh")
    changed = [x for x in out.values() if x.changed]
    assert len(changed) >= 0.8 * len(out)
    for x in changed:
        assert _replay(x.original, x.edits) == x.text
        for e in x.edits:
            assert len(e["before"]) >= 2 and e["after"] in zh[e["before"]][:3]


def test_shipped_word_lists_are_well_formed(res):
    en, zh = res.synonyms("en"), res.synonyms("zh")
    assert len(en) > 5000 and len(zh) > 20000
    assert en["show"] and "demo" not in en["show"]  # rare senses filtered
    assert all(s and s.lower() == s for s in en["effects"])
    assert "企业" in zh["公司"]
    hom = res.homophones()
    assert "钟" in hom["中"] and "中" not in hom["中"]
    assert res.templates("en") and res.templates("zh")


def test_a_word_list_in_the_wrong_format_names_file_and_line(tmp_path):
    bad = tmp_path / "list.tsv"
    bad.write_text("word\tsyn\nnotab\n", encoding="utf-8")
    with pytest.raises(Exception, match="line 2"):
        read_table(bad)


def test_distractor_appends_another_querys_text(ordqa, res):
    queries, qrels = ordqa.split("test")
    out = perturb_queries(queries, "distractor", seed=3, res=res, qrels={q: dict(d) for q, d in qrels.qrels.items()})
    for qid, x in out.items():
        e = x.edits[0]
        other = e["from_query"]
        assert other != qid and x.text == f"{x.original} {queries[other].strip()}"
        assert not (qrels.relevant(qid) & qrels.relevant(other))


def test_distractor_templates_and_chinese_join(cmrc_queries, res):
    out = perturb_queries(cmrc_queries, "distractor", seed=0, params={"source": "templates", "position": "start"},
                          res=res)
    for x in out.values():
        clause = x.edits[0]["clause"]
        assert clause in res.templates("zh") and x.text == clause + x.original  # no space between Chinese texts
