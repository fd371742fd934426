"""lab.data.labels: where a set's labels came from, read from the folders the repo ships and from small sets
written here the way lab.testset writes them (provenance.json, the qrels provenance sidecar)."""
from __future__ import annotations

import json
from pathlib import Path

from lab.data.labels import (
    MIN_KAPPA,
    LabelProvenance,
    from_tags,
    label_provenance,
    sidecar_path,
)

REPO = Path(__file__).resolve().parents[2]


def _set(tmp_path: Path, provenance: dict | None, sidecar: list[str] | None = None, rows: int = 4) -> Path:
    """A BEIR-like folder: qrels/test.tsv with ``rows`` rows, optional provenance.json and sidecar sources."""
    folder = tmp_path / "set"
    (folder / "qrels").mkdir(parents=True)
    lines = ["query-id\tcorpus-id\tscore"] + [f"q{i}\td{i}\t1" for i in range(rows)]
    (folder / "qrels" / "test.tsv").write_text("\n".join(lines) + "\n")
    if provenance is not None:
        (folder / "provenance.json").write_text(json.dumps(provenance))
    if sidecar is not None:
        sidecar_path(folder, "test").write_text("".join(
            json.dumps({"query_id": f"q{i}", "doc_id": f"d{i}", "grade": 1, "source": s}) + "\n"
            for i, s in enumerate(sidecar)))
    return folder


def test_a_shipped_beir_set_is_human():
    prov = label_provenance(REPO / "data" / "scifact", "test")
    assert prov.short() == {"source": "human", "generator": None, "judge": None, "judge_check": None}
    assert prov.counts == {"human": 339}  # every row of qrels/test.tsv


def test_a_generated_set_names_its_generator_and_prompt_but_no_path():
    prov = label_provenance(REPO / "data" / "ord-qa-generated", "test")
    assert prov.source == "generated"
    assert prov.generator.startswith("gguf:SmolLM2-135M-Instruct") and "/" not in prov.generator
    assert prov.prompt_version == "passage-question-answer-v1" and prov.judge is None
    reviewed = label_provenance(REPO / "data" / "ord-qa-generated-reviewed", "test")
    assert reviewed.source == "generated" and reviewed.reviewed == "40 of 115 queries reviewed by people"
    assert "/work" not in json.dumps(prov.as_dict())


def test_a_judged_set_with_its_card_is_mixed_and_names_the_judge(tmp_path):
    card = {"n_pairs": 40, "kappa": 0.12, "kappa_ci": [-0.05, 0.3]}
    folder = _set(tmp_path, {"kind": "annotation", "judge": {"identity": "gguf:judge@1", "prompt_version": "umbrela-v1",
                                                            "card": card,
                                                            "summary": "kappa 0.12 [-0.05, 0.30] on 40 pairs"}},
                  ["human", "human", "judged"])
    prov = label_provenance(folder, "test")
    # the sidecar names 3 rows, the 4th takes the set's default (human)
    assert prov.counts == {"human": 3, "judged": 1} and prov.source == "mixed"
    assert prov.judge == "gguf:judge@1" and prov.judge_check.startswith("kappa 0.12") and prov.judge_kappa == 0.12
    assert prov.judge_kappa < MIN_KAPPA


def test_a_judged_set_without_a_card_has_no_judge_check(tmp_path):
    folder = _set(tmp_path, {"kind": "generated", "llm": {"identity": "gguf:gen@2"},
                             "judge": {"identity": "gguf:judge@1", "prompt_version": "umbrela-v1"}},
                  ["judged"] * 4)
    prov = label_provenance(folder, "test")
    assert (prov.source, prov.judge, prov.judge_check, prov.generator) == ("judged", "gguf:judge@1", None, None)


def test_logs_and_a_full_review(tmp_path):
    logs = label_provenance(_set(tmp_path / "a", {"kind": "logs", "source_file": "/home/x/clicks.jsonl"}), "test")
    assert (logs.source, logs.generator) == ("generated", "query logs")
    full = {"kind": "generated", "llm": {"identity": "m"},
            "reviews": [{"reviewed": 4, "unreviewed": 0, "queries_after": 4}]}
    prov = label_provenance(_set(tmp_path / "b", full), "test")
    assert prov.source == "human" and prov.generator is None and prov.reviewed == "4 of 4 queries reviewed by people"


def test_tags_round_trip(tmp_path):
    prov = LabelProvenance("judged", judge="j", judge_check="kappa 0.5", judge_kappa=0.5)
    tags = prov.as_tags()
    assert tags == {"labels.source": "judged", "labels.judge": "j", "labels.judge_check": "kappa 0.5",
                    "labels.judge_kappa": "0.5"}
    assert from_tags(tags) == prov and from_tags({}) is None


def test_the_card_lab_testset_judge_writes_is_read_back(tmp_path):
    """The judge writes its card ({value, n, ci, ...} per figure) with write_judge_provenance; the trust block reads
    the same file: judge identity, one-line summary, kappa as a number."""
    from lab.testset.judge import write_judge_provenance
    from lab.testset.judgecheck import card_figures, summary

    records = [{"query_id": f"q{i}", "doc_id": f"d{i}", "kind": kind, "known": known, "grade": grade}
               for i, (kind, known, grade) in enumerate([("positive", 1, 3), ("positive", 1, 2), ("positive", 1, 0),
                                                          ("negative", 0, 0), ("negative", 0, 0), ("negative", 0, 3)])]
    card = card_figures(records, resamples=200)
    card["summary"] = summary(card)
    folder = _set(tmp_path, {"kind": "annotation"}, ["human", "human", "judged", "judged"])
    write_judge_provenance(folder, "gguf:judge@1", card)
    prov = label_provenance(folder, "test")
    assert prov.judge == "gguf:judge@1" and prov.judge_check == card["summary"]
    assert prov.judge_kappa == card["kappa"]["value"] and isinstance(prov.judge_kappa, float)
