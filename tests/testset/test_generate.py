"""lab.testset.generate: prompt, strict and lenient parsing, stratified seeded sampling, generation params, a tiny
real run with the packaged SmolLM2 (gates counted, set written and loadable), and the committed ord-qa set."""
from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest
from builders import mini_dataset

from lab.core.errors import ConfigError
from lab.data.beir import load_dataset
from lab.data.types import Corpus, Document
from lab.testset.gates import GATES
from lab.testset.generate import GenerationConfig, generate_testset
from lab.testset.qa_prompt import (
    PROMPT_VERSION,
    QUESTION_MIX,
    build_prompt,
    qa_schema,
    question_type,
)
from lab.testset.sampling import sample_order
from lab.testset.tiers import DIFFICULTY, difficulty

REPO = Path(__file__).resolve().parents[2]
GENERATED = REPO / "data" / "ord-qa-generated"


def test_tiny_real_generation_counts_every_candidate(tmp_path):
    """Two real SmolLM2 calls on a folder with only corpus.jsonl: every candidate is counted once (accepted, or
    dropped at exactly one gate), at least one question comes through, the set loads, and each accepted question's
    evidence span lies inside the passage it came from. Which passages are drawn depends on the passage order and
    the gates, so the test does not pin the model's words."""
    cfg = GenerationConfig(n=2, max_attempts=2, retries=0, min_passage_words=5)
    res = generate_testset(mini_dataset(tmp_path, corpus_only=True), tmp_path / "gen", config=cfg,
                           cache_dir=tmp_path / "cache", progress=False, tracking_root=None)
    rep = res.report
    assert rep.candidates == 2 and rep.accepted + sum(rep.dropped_at.values()) == rep.candidates
    assert rep.accepted >= 1
    for g in GATES:
        assert rep.passed[g] + rep.failed[g] <= rep.candidates
    lines = (res.folder / "candidates.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(lines) == 2 and {json.loads(ln)["round"] for ln in lines} == {0}
    prov = res.provenance
    assert prov["llm"]["identity"].startswith("gguf:SmolLM2-135M-Instruct")
    assert prov["prompt"]["version"] == PROMPT_VERSION
    assert prov["seed"] == 0 and prov["llm_usage"]["calls"] == 2 and prov["units"]["n_units"] == 3
    assert json.loads((res.folder / "gate_report.json").read_text())["candidates"] == 2
    assert prov["topic_model"]["name"] == "multilingual-e5-small" and not prov["topic_model"]["same_as_default_dense"]
    assert rep.extra["existing_queries_guarded"] == 0 and "route" not in prov
    assert set(rep.extra["skipped_not_prose"]) == {"ids", "code", "headings", "boilerplate"}
    asked = rep.extra["question_types"]["asked"]
    assert sum(asked.values()) == 2 and [json.loads(ln)["question_type"] for ln in lines] == [
        question_type(i, 0, 0) for i in range(2)]
    assert "/" not in json.dumps(prov["llm"]) + prov["units"]["source_path"]  # no machine paths
    for ln in lines:
        c = json.loads(ln)
        s, e = c["passage_span"]
        assert 0 <= s < e  # a window of the unit's text, not its first characters by construction
    ds = load_dataset(res.folder, progress=False)
    assert len(ds.corpus) == 3 and len(ds.queries) == rep.accepted
    assert prov["source_units"] == [ds.queries.metadata[q]["source_unit"] for q in ds.queries]
    assert {e.query_id for e in ds.evidence} == set(ds.queries)  # one evidence span per question
    for q in ds.queries:
        meta = ds.queries.metadata[q]
        assert meta["difficulty"] == difficulty(meta["bm25_rank"], meta["evidence_overlap"]) in DIFFICULTY
        assert meta["question_type"] in QUESTION_MIX
    for e in ds.evidence:
        meta = ds.queries.metadata[e.query_id]
        ps, pe = meta["passage_span"]
        assert e.doc_id == meta["source_unit"] and ps <= e.start < e.end <= pe
        assert ds.corpus[e.doc_id].text[ps:pe] == meta["passage"]


@pytest.mark.skipif(not GENERATED.is_dir(), reason="data/ord-qa-generated not built (lab testset generate)")
def test_committed_ord_qa_generated_set():
    """The set notebook 01 and the embedder fine-tuning use: >= 100 gated questions, source units recorded."""
    ds = load_dataset(GENERATED, progress=False)
    prov = json.loads((GENERATED / "provenance.json").read_text(encoding="utf-8"))
    queries, qrels = ds.split("test")
    assert len(qrels) >= 100 and len(ds.corpus) == 290
    assert prov["kind"] == "generated" and prov["llm"]["identity"].startswith("gguf:SmolLM2-135M-Instruct")
    assert [queries.metadata[q]["source_unit"] for q in qrels] == prov["source_units"][:len(qrels)]
    for q in qrels:
        assert queries.metadata[q]["source_unit"] in qrels[q]
    gate = prov["gate_report"]
    assert gate["candidates"] == sum(gate["dropped_at"].values()) + gate["accepted"]
    assert (GENERATED / "SOURCE.md").is_file()


def test_generation_stops_after_n_consecutive_endpoint_failures_and_keeps_what_was_done(tmp_path, always_500):
    """An endpoint that always fails stops the run after max_consecutive_failures calls (each
    after its retries) with one clear error; the gate report, candidates and provenance are written."""
    import time

    from lab.models.breaker import EndpointDown

    server = always_500
    spec = {"backend": "openai", "base_url": server.url, "model": "m", "max_retries": 2, "backoff_s": 0.01,
            "max_backoff_s": 0.02, "concurrency": 2}
    cfg = GenerationConfig(n=100, min_passage_words=5, max_consecutive_failures=3)
    t0 = time.perf_counter()
    with pytest.raises(EndpointDown) as exc:
        generate_testset(mini_dataset(tmp_path), tmp_path / "gen", llm=spec, config=cfg,
                         cache_dir=tmp_path / "cache", progress=False, tracking_root=None)
    seconds = time.perf_counter() - t0
    message = str(exc.value)
    # the call still in flight when the third failed (concurrency 2: the batch's calls go in together) may be a 4th
    assert "\n" not in message and re.match(r"test set generation stopped after [34] consecutive failed LLM", message)
    assert "--max-consecutive-failures 3" in message and "HTTP 500" in message and "model crashed" in message
    assert f"written to {tmp_path / 'gen'}" in message and "0 accepted questions" in message
    # 3 calls x 3 attempts each, plus at most the one other call in flight (concurrency 2): not ~600 requests
    assert 9 <= server.requests <= 12, server.requests
    prov = json.loads((tmp_path / "gen" / "provenance.json").read_text())
    assert prov["llm_usage"]["errors"] >= 3 and prov["llm_usage"]["retries"] >= 6
    assert re.search("stopped after [34] consecutive", json.loads((tmp_path / "gen" / "gate_report.json").read_text())[
        "extra"]["stopped"])
    assert seconds < 60


def test_chinese_passages_get_the_chinese_prompt_and_windows_reach_the_end():
    """Questions follow the passage's language: a Chinese window is sent with the Chinese prompt, an English one
    with the English prompt; windows cover the whole document, not its first characters."""
    from lab.testset.candidates import passage_candidates

    zh = "# 线电阻\n\n" + "set_wire_rc 命令设置用于估计布线延迟的电阻和电容，时钟网络和数据网络可以分别设置。" * 30
    en = "# Wire RC\n\n" + "The set_wire_rc command sets the resistance and capacitance of routing wires. " * 40
    corpus = Corpus({"zh": Document("zh", zh), "en": Document("en", en)})
    cfg = GenerationConfig(n=1, rounds=1, min_passage_words=10)
    passages, _, _, _ = sample_order(corpus, 0, "doc", 10, cfg.max_passage_chars)
    cands = list(passage_candidates(passages, cfg))
    assert {c.unit_id for c in cands} == {"zh", "en"} and len(cands) == len(passages) > 2
    for c in cands:
        assert c.language == c.unit_id and c.prompt.endswith(c.passage)
        assert c.prompt.startswith("给定以下文档段落") == (c.unit_id == "zh")
    for uid, text in (("zh", zh), ("en", en)):
        assert max(c.span[1] for c in cands if c.unit_id == uid) == len(text.rstrip())


ASYMPTOTE = REPO / "data" / "asymptote-generated"


@pytest.mark.skipif(not ASYMPTOTE.is_dir(), reason="data/asymptote-generated not built (lab testset generate)")
def test_committed_asymptote_generated_set():
    """Generated offline from an ingested documentation folder (corpus only): >= 100 gated questions, each with
    the exact passage the model saw and an evidence span inside it, qrels at document level."""
    ds = load_dataset(ASYMPTOTE, progress=False)
    prov = json.loads((ASYMPTOTE / "provenance.json").read_text(encoding="utf-8"))
    queries, qrels = ds.split("test")
    assert len(qrels) >= 100 and len(ds.corpus) == 163 and prov["units"]["chunking"] == {"chunker": "none"}
    assert prov["topic_model"]["name"] == "multilingual-e5-small" and not prov["topic_model"]["same_as_default_dense"]
    spans = {e.query_id: e for e in ds.evidence}
    assert set(spans) == set(qrels)
    for q in qrels:
        meta = queries.metadata[q]
        ps, pe = meta["passage_span"]
        e = spans[q]
        assert list(qrels[q]) == [meta["source_unit"]] == [e.doc_id]
        assert ds.corpus[e.doc_id].text[ps:pe] == meta["passage"] and ps <= e.start < e.end <= pe
    assert len({queries.metadata[q]["passage_span"][0] > 0 for q in qrels}) == 2  # not only first characters
    gate = prov["gate_report"]
    assert gate["candidates"] == sum(gate["dropped_at"].values()) + gate["accepted"]
    assert (ASYMPTOTE / "SOURCE.md").is_file()


def _texts(folder: Path) -> list[tuple]:
    """(question, source unit, passage span, raw output) of every candidate a generation checked, in order."""
    rows = [json.loads(ln) for ln in (folder / "candidates.jsonl").read_text(encoding="utf-8").splitlines()]
    return [(r["question"], r["unit_id"], tuple(r["passage_span"]), r["raw"], r["accepted_as"]) for r in rows]


def test_same_seed_gives_the_same_set_even_without_the_cache(tmp_path):
    """Two cold runs (separate caches, so every answer is generated again by the packaged SmolLM2 at concurrency
    1) with the same seed write the same candidates, questions and evidence."""
    src = mini_dataset(tmp_path, corpus_only=True)
    cfg = GenerationConfig(n=2, max_attempts=2, retries=0, min_passage_words=5)
    runs = [generate_testset(src, tmp_path / f"gen{i}", config=cfg, cache_dir=tmp_path / f"cache{i}",
                             progress=False, tracking_root=None) for i in (1, 2)]
    assert all(r.provenance["llm_usage"]["cache_hits"] == 0 for r in runs)
    assert _texts(runs[0].folder) == _texts(runs[1].folder) and len(_texts(runs[0].folder)) == 2
    for name in ("queries.jsonl", "evidence.jsonl", "generation.json"):
        if (runs[0].folder / name).exists():
            assert (runs[0].folder / name).read_text() == (runs[1].folder / name).read_text()


def test_a_folder_that_holds_a_set_is_refused_unless_force_or_resume(tmp_path):
    """Generating into a folder that holds a set refuses before any work; --resume continues it only with the same
    settings (answers already made come from the cache, first candidates unchanged); --force replaces only the
    set's own files."""
    src = mini_dataset(tmp_path, corpus_only=True)
    out, cache = tmp_path / "gen", tmp_path / "cache"
    cfg = GenerationConfig(n=1, max_attempts=2, retries=0, min_passage_words=5)
    first = generate_testset(src, out, config=cfg, cache_dir=cache, progress=False, tracking_root=None)
    before = _texts(out)
    (out / "notes.txt").write_text("mine", encoding="utf-8")
    missing = tmp_path / "no-such-dataset"  # the refusal comes before the dataset is even read
    with pytest.raises(ConfigError, match=r"holds a test set \(.*generation.json\); pass --resume to continue it, "
                                          "--force to replace it"):
        generate_testset(missing, out, config=cfg, cache_dir=cache, progress=False, tracking_root=None)
    with pytest.raises(ConfigError, match=r"generation.json, field 'params.seed': the set was made with 0, this run "
                                          "asks for 1"):
        generate_testset(missing, out, config=GenerationConfig(n=1, seed=1, retries=0, min_passage_words=5),
                         cache_dir=cache, progress=False, tracking_root=None, resume=True)
    with pytest.raises(ConfigError, match="pass one"):
        generate_testset(missing, out, config=cfg, cache_dir=cache, progress=False, tracking_root=None, resume=True,
                         force=True)
    more = GenerationConfig(n=2, max_attempts=3, retries=0, min_passage_words=5)
    resumed = generate_testset(src, out, config=more, cache_dir=cache, progress=False, tracking_root=None,
                               resume=True)
    assert resumed.provenance["resumed"] and resumed.provenance["llm_usage"]["cache_hits"] >= len(before)
    assert _texts(out)[:len(before)] == before and len(_texts(out)) > len(before)
    (out / "qrels").mkdir(exist_ok=True)
    (out / "qrels" / "stale.tsv").write_text("query-id\tcorpus-id\tscore\n", encoding="utf-8")
    generate_testset(src, out, config=cfg, cache_dir=cache, progress=False, tracking_root=None, force=True)
    assert _texts(out) == before and not (out / "qrels" / "stale.tsv").exists()
    assert (out / "notes.txt").read_text(encoding="utf-8") == "mine" and first.folder == out


def test_question_types_follow_the_stated_mix_and_the_schema_holds_the_first_word():
    """Every 20 consecutive candidates ask the target mix (5 what, 5 how, 3 why, 2 when, 3 which, 2
    troubleshooting), in an order the seed shuffles; the prompt asks for the type and the English schema holds
    the question to its first word."""
    import re

    for seed in (0, 1):
        got = Counter(question_type(i, 0, seed) for i in range(40))
        assert got == Counter({t: 2 * k for t, k in QUESTION_MIX.items()})
    assert [question_type(i, 0, 0) for i in range(20)] != [question_type(i, 0, 1) for i in range(20)]
    assert question_type(3, 1, 0) == question_type(4, 0, 0)  # a later round shifts the type
    assert 'Ask a "Why" question' in build_prompt("The gzip command compresses files.", "en", qtype="why")
    assert "排障问题" in build_prompt("段落", "zh", qtype="troubleshooting")
    why = qa_schema("en", "why")["properties"]["question"]["pattern"]
    assert re.match(why, "Why does the gzip command keep the original file?") and not re.match(
        why, "What does the gzip command keep?")
    assert qa_schema("zh", "why") == qa_schema("zh")


def test_dry_run_prints_the_estimate_writes_nothing_and_its_sample_is_reused(tmp_path):
    src = mini_dataset(tmp_path, corpus_only=True)
    out, cache, lines = tmp_path / "gen", tmp_path / "cache", []
    cfg = GenerationConfig(n=3, max_attempts=4, batch_size=2, retries=0, min_passage_words=5)
    res = generate_testset(src, out, config=cfg, cache_dir=cache, progress=False, tracking_root=None, dry_run=True,
                           echo=lines.append)
    est = res.report.extra["estimate"]
    assert res.folder is None and not out.exists() and lines == [lines[0]] and lines[0].startswith("estimate: ")
    assert est["sample"] == 2 and 0 < est["candidates"] <= 4 and est["calls"] >= est["candidates"]
    real = generate_testset(src, out, config=cfg, cache_dir=cache, progress=False, tracking_root=None)
    assert real.provenance["llm_usage"]["cache_hits"] >= 2 and "estimate" in real.report.extra


def test_a_small_set_does_not_write_a_full_batch_first():
    """notebook 01 asks for 1 question: it wrote 8 candidates (up to 4 calls each) before the gates looked at one."""
    from lab.testset.generate import next_batch_size

    assert next_batch_size(GenerationConfig(n=1)) == 2
    assert next_batch_size(GenerationConfig(n=100), accepted=0) == 8
    assert next_batch_size(GenerationConfig(n=100), accepted=99) == 2
    assert next_batch_size(GenerationConfig(n=1), slots=4) == 4
    assert next_batch_size(GenerationConfig(n=100), slots=12) == 12
