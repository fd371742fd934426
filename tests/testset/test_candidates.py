"""lab.testset.candidates: generation params per round and retry, a batch of mixed question types in flight at
once, and a retry after a failed text gate (scripted LLMs)."""
from __future__ import annotations

import json
import re

import pytest

from lab.core.errors import ConfigError
from lab.testset.candidates import generation_params
from lab.testset.generate import GenerationConfig
from lab.testset.qa_prompt import (
    qa_schema,
    question_type,
)


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

    from lab.testset.candidates import Candidate, generate_batch
    from lab.testset.gates import GateReport

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
    from lab.testset.candidates import Candidate, generate_batch
    from lab.testset.gates import GateReport

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
