"""lab.testset.gates: each gate on real-looking candidates, the funnel report, greedy near-duplicates."""
from __future__ import annotations

import numpy as np
import pytest

from lab.errors import ConfigError
from lab.testset.gates import (GATES, GateConfig, GateReport, check_text_gates, greedy_duplicates, is_question,
                               length_ok, repetition, term_coverage)
from lab.text import Tokenizer

PASSAGE = ("The set_wire_rc command sets the resistance and capacitance used to estimate delay of routing wires. "
           "Separate values can be specified for clock and data nets with the -signal and -clock flags.")


@pytest.fixture(scope="module")
def tok():
    return Tokenizer(language="auto", stem=True, stopwords="nltk")


def test_is_question():
    assert is_question("Which flag gives clock nets their own wire parasitics?")
    assert is_question("How do I zoom in on a region")  # interrogative start, no question mark
    assert not is_question("Macro Placement")
    assert not is_question("The restructure module is based on ABC.")
    assert not is_question("")
    assert not is_question("How to use this tool: 1. Run the command. 2. Print the output of ?")  # a list, cut off
    assert not is_question("What does the command print the output of the ?")
    assert is_question("What is the macro placement module in OpenROAD (`mpl`) based on?")
    assert not is_question("What is a macro? What is a pin?")  # two questions
    assert is_question("What does gen.py write, e.g. for dbNet?")
    assert is_question("如何为时钟网络单独设置线电阻？", "zh") and is_question("这个命令的作用是什么", "zh")
    assert not is_question("设置线电阻。", "zh")


def test_length_bounds():
    cfg = GateConfig()
    assert length_ok("Which flag sets clock parasitics?", "-clock", cfg)
    assert not length_ok("Which flag?", "-clock", cfg)  # 2 words < 4
    assert not length_ok("Which flag sets clock parasitics?", "   ", cfg)  # empty answer
    assert not length_ok("Which flag sets clock parasitics?", "word " * 121, cfg)
    assert length_ok("如何设置时钟线电阻？", "用 set_wire_rc", cfg, "zh")
    assert not length_ok("电阻？", "用 set_wire_rc", cfg, "zh")


def test_repetition_detects_loops():
    assert repetition("The answer is: " * 8) > 0.6
    assert repetition("Use set_wire_rc with the -clock flag for clock nets.") == 0.0
    assert repetition("two words") == 0.0


def test_overlap_and_support_use_content_terms(tok):
    terms = set(tok(PASSAGE))
    copied = "What does the set_wire_rc command set for routing wires?"
    reworded = "Which setting gives clock and data nets different parasitic estimates?"
    assert term_coverage(copied, terms, tok) > 0.75 > term_coverage(reworded, terms, tok)
    assert term_coverage("What is it?", terms, tok) == 1.0  # no content term: nothing new, fails low_overlap
    res, meas = check_text_gates(reworded, "Use the -signal and -clock flags of set_wire_rc.", terms, GateConfig(), tok)
    assert all(res.values()) and set(res) == {"is_question", "length", "no_repetition", "low_overlap", "answerable"}
    res, meas = check_text_gates(copied, "It is 1000 on a 3D map tile.", terms, GateConfig(), tok)
    assert not res["low_overlap"] and not res["answerable"] and meas["answer_support"] < 0.5
    res, _ = check_text_gates(reworded, "x", terms, GateConfig(answerability="llm"), tok)
    assert "answerable" not in res  # the LLM judge decides it


def test_greedy_duplicates_keep_the_first():
    v = np.eye(3, dtype=np.float32)
    near = (v[0] + 0.1 * v[1]) / np.linalg.norm(v[0] + 0.1 * v[1])
    assert greedy_duplicates(np.stack([v[0], near, v[1], v[0]]), 0.9) == [False, True, False, True]
    assert greedy_duplicates(v[1:2], 0.9, kept=v[1:2]) == [True]


def test_report_funnel_counts():
    r = GateReport(config={})
    assert r.add({"valid_json": False}) == "valid_json"
    assert r.add({g: True for g in GATES}) is None
    assert r.add({**{g: True for g in GATES[:-1]}, "low_overlap": False, "on_topic": False}) == "low_overlap"
    assert (r.candidates, r.accepted, r.dropped_at["low_overlap"], r.failed["on_topic"]) == (3, 1, 1, 1)
    m = r.metrics()
    assert m["yield"] == pytest.approx(1 / 3) and m["gate_valid_json_dropped"] == 1
    table = r.table()
    assert "low_overlap" in table and "accepted 1" in table


def test_config_validation():
    with pytest.raises(ConfigError):
        GateConfig(answerability="oracle")
    with pytest.raises(ConfigError):
        GateConfig(max_overlap=1.5)
