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
from lab.testset.generate import (
    DIFFICULTY,
    PROMPT_VERSION,
    QUESTION_MIX,
    GenerationConfig,
    build_prompt,
    difficulty,
    generate_testset,
    generation_params,
    parse_qa,
    parse_yes_no,
    qa_schema,
    question_type,
    sample_order,
    shown_passage,
    stratum_of,
)

REPO = Path(__file__).resolve().parents[2]
GENERATED = REPO / "data" / "ord-qa-generated"


def test_prompt_in_both_languages():
    en = build_prompt("The gzip command compresses files.", "en")
    assert "must not directly contain the key words" in en and en.endswith("The gzip command compresses files.")
    assert '{"question": "...", "answer": "..."}' in en
    zh = build_prompt("段落", "zh")
    assert zh.startswith("给定以下文档段落，生成一个用户可能会问的、恰好需要这段信息才能回答的问题")
    assert "问题不能直接包含段落中的关键词" in zh


def test_shown_passage_cuts_at_a_boundary():
    text = "word " * 300
    cut = shown_passage(text, 100)
    assert len(cut) <= 100 and not cut.endswith("wor") and shown_passage("short", 100) == "short"


@pytest.mark.parametrize("text,expected,repaired", [
    ('{"question": "Which flag?", "answer": "-clock"}', {"question": "Which flag?", "answer": "-clock"}, False),
    ('  {"answer": "-clock", "question": "Which flag?"}\n', {"question": "Which flag?", "answer": "-clock"}, False),
    ('```json\n{"question": "Which flag?", "answer": "-clock",}\n```', {"question": "Which flag?", "answer": "-clock"},
     True),
    ('Sure! {\u201cquestion\u201d: \u201cWhich flag?\u201d, \u201canswer\u201d: \u201c-clock\u201d}',
     {"question": "Which flag?", "answer": "-clock"}, True),
    ('{"question": "Which flag?", "answer": "the -clock fl', {"question": "Which flag?", "answer": "the -clock fl"},
     True),
    ("Question: Which flag sets clock RC?\nAnswer: -clock", {"question": "Which flag sets clock RC?",
                                                             "answer": "-clock"}, True),
])
def test_parse_qa_strict_then_one_lenient_repair(text, expected, repaired):
    assert parse_qa(text) == (expected, repaired)


@pytest.mark.parametrize("text", ["", "Macro Placement", '{"question": "", "answer": "x"}', '{"question": 3}',
                                  "[1, 2]"])
def test_parse_qa_gives_up(text):
    assert parse_qa(text) == (None, False)


def test_parse_yes_no():
    assert parse_yes_no("Yes.") is True and parse_yes_no(" no") is False and parse_yes_no("是") is True
    assert parse_yes_no("Maybe") is None


def _corpus() -> Corpus:
    docs = {}
    for sec, n in (("a", 5), ("b", 2), ("c", 1)):
        for i in range(n):
            docs[f"{sec}{i}"] = Document(f"{sec}{i}", f"# {sec.upper()} heading\n" + "some words here " * 10,
                                         metadata={"source": sec})
    docs["tiny"] = Document("tiny", "too short", metadata={"source": "c"})
    return Corpus(docs)


def test_sample_order_is_stratified_seeded_and_skips_short_units():
    corpus = _corpus()
    passages, skipped, strata, _ = sample_order(corpus, seed=1, stratify="section", min_passage_words=10)
    order = [p.unit_id for p in passages]
    # each unit is one section (its heading and body); "tiny" is one window, too short
    assert skipped == 1 and "tiny" not in order and len(order) == 8 == len(set(order))
    assert {strata[p.key] for p in passages[:3]} == {"a", "b", "c"}  # round-robin: every section before any repeats
    assert Counter(strata[p.key] for p in passages[:5]) == Counter({"a": 2, "b": 2, "c": 1})
    assert all(p.text == corpus[p.unit_id].text[p.start:p.end] and p.section.endswith("heading") for p in passages)
    assert sample_order(corpus, 1, "section", 10)[0] == passages
    assert sample_order(corpus, 2, "section", 10)[0] != passages
    assert stratum_of(corpus["a0"], "doc") == "a0" and stratum_of(Document("x", "# Head\ntext"), "section") == "Head"
    assert stratum_of(Document("x@0-5", "t", metadata={"doc_id": "x"}), "doc") == "x"


def test_generation_params_per_round_and_retry():
    cfg = GenerationConfig(n=5, seed=3)
    assert generation_params(cfg, 0, 0)["temperature"] == 0.0 and generation_params(cfg, 0, 0)["seed"] == 3
    r1, retry = generation_params(cfg, 1, 0), generation_params(cfg, 0, 1)
    assert (r1["temperature"], r1["seed"]) == (0.7, 4) and (retry["temperature"], retry["seed"]) == (0.7, 1003)
    schema = generation_params(cfg, 0, 0)["response_format"]["json_schema"]["schema"]
    assert schema == qa_schema("en") and list(schema["properties"]) == ["question", "answer"]  # the default
    answer = schema["properties"]["answer"]  # no answer that is itself a question; short enough not to loop
    assert re.search(answer["pattern"], "It closes the handle.") and answer["maxLength"] == 120
    for bad in ("Is it closed?", "关闭了吗？", "x" * 121, ""):
        assert not re.search(answer["pattern"], bad), bad
    assert "response_format" not in generation_params(GenerationConfig(json_mode="prompt"), 0, 0)
    first = generation_params(GenerationConfig(write_first="answer"), 0, 0)["response_format"]["json_schema"]["schema"]
    assert list(first["properties"]) == first["required"] == ["answer", "question"]
    assert first["properties"] == schema["properties"]  # the same fields, only their order differs
    with pytest.raises(ConfigError, match="write_first='both': use one of"):
        GenerationConfig(write_first="both")
    with pytest.raises(ConfigError):
        GenerationConfig(stratify="topic")
    with pytest.raises(ConfigError):
        GenerationConfig(grade=4)


def test_a_batch_of_mixed_types_is_in_flight_at_once(tmp_path):
    """Each try of a batch sends every candidate together, each with its own params (type, round): with
    ``concurrency`` 8, a batch of 8 candidates of mixed types has 8 calls in flight at once (grouped by params, it
    had 1-3), and each prompt still gets its type's schema and its round's temperature."""
    import threading

    from lab.testset.gates import GateReport
    from lab.testset.generate import Candidate, generate_batch

    class Slow:
        concurrency = 8

        def __init__(self):
            self.lock, self.now, self.most, self.seen = threading.Lock(), 0, 0, {}
            self.all_in = threading.Barrier(8, timeout=10)

        def complete(self, prompt, **gen):
            with self.lock:
                self.now += 1
                self.most = max(self.most, self.now)
                self.seen[prompt] = gen
            self.all_in.wait()  # returns only once all 8 are in flight (BrokenBarrierError otherwise)
            with self.lock:
                self.now -= 1
            qtype = prompt.split(":")[0]
            return type("C", (), {"text": json.dumps({"answer": "a", "question": f"{qtype.title()} is it?"})})()

    cfg = GenerationConfig(n=8)
    types = [question_type(i, 0, 0) for i in range(8)]
    assert len(set(types)) > 2
    batch = [Candidate(i, f"u{i}", i % 2, "en", f"{t}:{i}", "passage", qtype=t) for i, t in enumerate(types)]
    llm = Slow()
    generate_batch(llm, batch, cfg, GateReport(config={}))
    assert llm.most == 8 and all(c.qa is not None and c.tries == 1 for c in batch)
    for c in batch:
        assert llm.seen[c.prompt] == generation_params(cfg, c.round, 0, "en", c.qtype)


def test_a_retry_after_a_failed_text_gate_replaces_the_answer_only_when_it_parses():
    """With ``retry_if`` (retry_on="text_gates"), a parsed answer that fails a cheap gate gets a second sample at
    the retry temperature; a second sample that does not parse leaves the first answer in place, and one that
    parses replaces it. Without ``retry_if`` (retry_on="parse") a parsed answer is never generated again."""
    from lab.testset.gates import GateReport
    from lab.testset.generate import Candidate, generate_batch

    class Scripted:
        concurrency = 1

        def __init__(self, second: dict[str, str]):
            self.second, self.calls = second, []

        def complete(self, prompt, **gen):
            self.calls.append((prompt, gen["temperature"]))
            text = (json.dumps({"answer": "x", "question": "What is it?"}) if gen["temperature"] == 0.0
                    else self.second[prompt])
            return type("C", (), {"text": text})()

    good = json.dumps({"answer": "the page size", "question": "What does the header store?"})
    cfg = GenerationConfig(n=2, retries=1)
    batch = [Candidate(0, "u0", 0, "en", "p0", "passage"), Candidate(1, "u1", 0, "en", "p1", "passage")]
    llm, report = Scripted({"p0": good, "p1": "not json at all"}), GateReport(config={})
    generate_batch(llm, batch, cfg, report, retry_if=lambda c: c.qa["answer"] == "x")
    assert [t for _, t in llm.calls] == [0.0, 0.0, 0.7, 0.7] and report.extra["gate_retries"] == 2
    assert batch[0].qa["answer"] == "the page size" and batch[0].tries == 2 and batch[0].text == good
    assert batch[1].qa["answer"] == "x" and batch[1].tries == 2  # the retry did not parse: the first answer stays
    assert report.retries == 2
    plain = [Candidate(0, "u0", 0, "en", "p0", "passage")]
    llm = Scripted({"p0": good})
    generate_batch(llm, plain, cfg, GateReport(config={}))
    assert len(llm.calls) == 1 and plain[0].qa["answer"] == "x" and plain[0].tries == 1
    with pytest.raises(ConfigError, match="retry_on"):
        GenerationConfig(retry_on="always")


def test_tiny_real_generation_counts_every_candidate(tmp_path):
    """Two real SmolLM2 calls on a folder with only corpus.jsonl: every candidate is counted once, the set loads,
    and each accepted question's evidence span lies inside the passage it came from. Greedy decoding with the pinned
    model and llama.cpp build writes the same two candidates every time: one accepted ("What is the difference
    between the ABC and the Blif in the RMP?") and one dropped at `answerable` ("The answer is not provided, but
    you can find it in the passage.")."""
    cfg = GenerationConfig(n=2, max_attempts=2, retries=0, min_passage_words=5)
    res = generate_testset(mini_dataset(tmp_path, corpus_only=True), tmp_path / "gen", config=cfg,
                           cache_dir=tmp_path / "cache", progress=False, tracking_root=None)
    rep = res.report
    assert rep.candidates == 2 and rep.accepted + sum(rep.dropped_at.values()) == rep.candidates
    assert rep.accepted == 1 and rep.dropped_at["answerable"] == 1
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
    assert len(ds.corpus) == 3 and len(ds.queries) == rep.accepted == 1
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


def test_max_consecutive_failures_is_checked():
    with pytest.raises(ConfigError, match="max_consecutive_failures=0: expected an integer >= 1"):
        GenerationConfig(max_consecutive_failures=0)


def test_chinese_passages_get_the_chinese_prompt_and_windows_reach_the_end():
    """Questions follow the passage's language: a Chinese window is sent with the Chinese prompt, an English one
    with the English prompt; windows cover the whole document, not its first characters."""
    from lab.testset.generate import passage_candidates

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


@pytest.mark.parametrize("rank, overlap, tier", [(1, 0.8, "easy"), (3, 0.5, "easy"), (1, 0.3, "medium"),
                                                 (4, 0.9, "medium"), (10, 0.0, "medium"), (11, 1.0, "hard"),
                                                 (None, 1.0, "hard")])
def test_difficulty_tier_rule(rank, overlap, tier):
    assert difficulty(rank, overlap) == tier


def test_estimate_from_the_timed_sample():
    """n / smoothed yield candidates (capped), calls and tokens per candidate as sampled, the cold time when the
    sample came from the cache."""
    from lab.testset.generate import estimate_run, format_estimate

    usage = {"calls": 8, "prompt_tokens": 3000, "completion_tokens": 1000, "cold_seconds": 40.0, "cache_hits": 0}
    est = estimate_run(100, 1000, 8, 2, 40.0, usage)
    assert est["yield_estimate"] == 0.3 and est["candidates"] == 334 and est["calls"] == 334
    assert est["tokens"] == 334 * 500 and est["seconds"] == 334 * 5.0
    assert estimate_run(100, 200, 8, 0, 40.0, usage)["candidates"] == 200  # capped by max attempts
    cached = estimate_run(10, 100, 8, 7, 0.1, {**usage, "cache_hits": 8}, concurrency=2)
    assert cached["candidates"] == 13 and cached["seconds"] == 13 * 2.5  # cold 40 s / 2 slots / 8 candidates
    assert format_estimate(est).startswith("estimate: about 334 candidates, 334 LLM calls, 167,000 tokens, 27.8 min")


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
