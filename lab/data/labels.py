"""Where a set's relevance labels came from: people, a model that wrote the questions, or a model that judged them.

One reading of a dataset folder, done here so that runs can log it and every leaderboard can show it
(:func:`label_provenance`); nothing downstream guesses it.

Inputs (all optional; a folder with none of them is a shipped or imported BEIR set, labelled by people)
- ``provenance.json`` (lab.testset.io): ``kind`` "generated" (``lab testset generate``: ``llm.identity``,
  ``prompt.version``, ``gate_report``), "logs" (``lab testset import-logs``: links from query logs), "annotation"
  (people's grades); ``reviews`` (``lab testset review``: spot checks by people); ``judge`` (``lab testset judge``:
  ``identity``, ``prompt_version``, and when the judge was checked on known labels its ``card`` (the
  ``lab testset judge-check`` JSON: n_pairs, kappa, kappa_ci, ...) and ``summary``, one line).
- ``qrels/<split>.provenance.jsonl`` (lab.testset.judge): one object per qrels row, ``source`` = generated |
  human | judged.

Rule for ``source`` (one of :data:`SOURCES`)
- With the sidecar: the sources of its rows; a qrels row it does not name counts as the set's default (below).
- Without it: every label has the set's default: "generated" for kind "generated" or "logs" (machine-made links),
  else "human" (kind "annotation", or no provenance.json at all: a shipped BEIR set).
- One source among the labels: that source; more than one: "mixed" (``counts`` says how many of each).
- A generated set every query of which people reviewed (``reviews``: ``unreviewed`` 0 and ``reviewed`` equal to
  ``queries_after``) counts as "human"; a partial review is named in ``reviewed`` and the source stays "generated".

``generator``: the model that wrote generated labels (``llm.identity``; "query logs" for kind "logs"), when any
label is generated, else None. ``judge``: the judge's identity when any label is judged, else None.
``judge_check``: the card's one-line summary, None when no judge or no card; ``judge_kappa``: the card's
``kappa`` (None without a card); ``judge_card``: the card itself. ``graders``: for people's labels graded by two
graders (``lab testset import-annotation --graders``), the ``agreement.summary`` of provenance.json ("2 graders,
kappa 0.71 [0.62, 0.79] on 180 pairs"), else None.
No field holds a machine path.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

#: Label sources, as the leaderboards name them.
SOURCES = ("human", "generated", "judged", "mixed")
#: Run tags (lab.tracking.results) and their LabelProvenance fields.
TAG_FIELDS = {"labels.source": "source", "labels.generator": "generator", "labels.judge": "judge",
              "labels.judge_check": "judge_check", "labels.judge_kappa": "judge_kappa", "labels.graders": "graders"}
#: The four fields every leaderboard shows (``trust.labels``).
SHOWN = ("source", "generator", "judge", "judge_check")
#: Cohen's kappa a judge must reach on known labels before its labels are trusted (Landis & Koch 1977: above
#: 0.4 is "moderate" agreement); the trust warnings use it, and ``lab testset judge --min-kappa`` defaults to it.
MIN_KAPPA = 0.4
PROVENANCE_FILE = "provenance.json"


@dataclass(frozen=True)
class LabelProvenance:
    """Where a split's labels came from (see the module docstring for each field's rule)."""

    source: str
    generator: str | None = None
    judge: str | None = None
    judge_check: str | None = None
    judge_kappa: float | None = None
    judge_card: dict[str, Any] | None = field(default=None, compare=False)
    prompt_version: str | None = None
    reviewed: str | None = None
    counts: dict[str, Any] = field(default_factory=dict, compare=False)
    graders: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready dict of every field."""
        return asdict(self)

    def as_tags(self) -> dict[str, str]:
        """The run tags :data:`TAG_FIELDS` (fields that are None left out)."""
        return {tag: str(getattr(self, f)) for tag, f in TAG_FIELDS.items() if getattr(self, f) is not None}

    def short(self) -> dict[str, Any]:
        """The four fields every leaderboard shows: source, generator, judge, judge_check."""
        return {f: getattr(self, f) for f in SHOWN}


def sidecar_path(folder: str | Path, split: str) -> Path:
    """``qrels/<split>.provenance.jsonl`` of a set (written by lab.testset.judge)."""
    return Path(folder) / "qrels" / f"{split}.provenance.jsonl"


def read_provenance_file(folder: str | Path) -> dict[str, Any]:
    """``provenance.json`` of a set, {} when there is none or it is not a JSON object."""
    path = Path(folder) / PROVENANCE_FILE
    if not path.is_file():
        return {}
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {}
    return doc if isinstance(doc, dict) else {}


def _sidecar_counts(folder: Path, split: str) -> dict[str, int]:
    """Rows of the sidecar per source ({} when there is no sidecar); unreadable lines are skipped."""
    path = sidecar_path(folder, split)
    if not path.is_file():
        return {}
    counts: dict[str, int] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            src = str(json.loads(line)["source"])
        except (json.JSONDecodeError, KeyError, TypeError):
            continue
        counts[src] = counts.get(src, 0) + 1
    return counts


def _qrels_rows(folder: Path, split: str) -> int | None:
    """Rows of ``qrels/<split>.tsv`` (header left out), None when it is absent."""
    path = folder / "qrels" / f"{split}.tsv"
    if not path.is_file():
        return None
    lines = [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
    return max(0, len(lines) - (1 if lines and lines[0].lower().startswith("query") else 0))


def _fully_reviewed(prov: Mapping[str, Any]) -> tuple[bool, str | None]:
    """(every query reviewed by people, a line naming the review) from ``reviews`` of provenance.json."""
    reviews = [r for r in prov.get("reviews") or [] if isinstance(r, Mapping)]
    if not reviews:
        return False, None
    last = reviews[-1]
    reviewed, left = int(last.get("reviewed", 0) or 0), int(last.get("unreviewed", 0) or 0)
    after = last.get("queries_after")
    total = reviewed + left if after is None else int(after)
    full = left == 0 and reviewed >= total > 0
    return full, f"{reviewed} of {max(total, reviewed)} queries reviewed by people"


def _generator(prov: Mapping[str, Any]) -> str | None:
    if prov.get("kind") == "logs":
        return "query logs"
    llm = prov.get("llm")
    ident = llm.get("identity") if isinstance(llm, Mapping) else None
    return str(ident) if ident else "unknown model"


def _judge(prov: Mapping[str, Any]) -> tuple[str | None, dict[str, Any] | None, str | None]:
    """(judge identity, card, summary) from provenance.json's ``judge`` key."""
    j = prov.get("judge")
    if not isinstance(j, Mapping):
        return None, None, None
    card = j.get("card") if isinstance(j.get("card"), Mapping) else None
    summary = j.get("summary") if card is not None and j.get("summary") else None
    return (str(j.get("identity") or "unknown judge"), dict(card) if card is not None else None,
            str(summary) if summary else None)


def label_provenance(folder: str | Path, split: str = "test") -> LabelProvenance:
    """The provenance of split ``split``'s labels in the dataset folder ``folder`` (module docstring)."""
    folder = Path(folder)
    prov = read_provenance_file(folder)
    kind = prov.get("kind")
    full_review, reviewed = _fully_reviewed(prov) if kind in ("generated", "logs") else (False, None)
    default = "generated" if kind in ("generated", "logs") and not full_review else "human"
    counts = _sidecar_counts(folder, split)
    rows = _qrels_rows(folder, split)
    named = sum(counts.values())
    if not counts:
        counts = {default: rows or 0}
    elif rows is not None and rows > named:
        counts[default] = counts.get(default, 0) + rows - named
    if full_review and "generated" in counts:  # the sidecar predates a full review
        counts["human"] = counts.get("human", 0) + counts.pop("generated")
    present = sorted(s for s, n in counts.items() if n > 0) or [default]
    source = present[0] if len(present) == 1 else "mixed"
    judge, card, summary = _judge(prov) if "judged" in present else (None, None, None)
    if "judged" in present and judge is None:
        judge = "unknown judge"
    generator = _generator(prov) if "generated" in present else None
    prompt = prov.get("prompt", {}).get("version") if isinstance(prov.get("prompt"), Mapping) else None
    kappa = card.get("kappa") if card else None
    if isinstance(kappa, Mapping):  # the judge-check card: {"value", "n", "ci", ...}
        kappa = kappa.get("value")
    agreement = prov.get("agreement") if "human" in present else None
    graders = agreement.get("summary") if isinstance(agreement, Mapping) else None
    return LabelProvenance(source=source, generator=generator, judge=judge, judge_check=summary,
                           judge_kappa=float(kappa) if isinstance(kappa, (int, float)) else None, judge_card=card,
                           prompt_version=str(prompt) if prompt and generator else None, reviewed=reviewed,
                           counts=dict(sorted(counts.items())), graders=str(graders) if graders else None)


def from_tags(tags: Mapping[str, str]) -> LabelProvenance | None:
    """The provenance a run logged as tags (:data:`TAG_FIELDS`), None when it logged none (older runs)."""
    if "labels.source" not in tags:
        return None
    values: dict[str, Any] = {f: tags.get(tag) or None for tag, f in TAG_FIELDS.items()}  # judge_kappa: a float
    try:
        values["judge_kappa"] = float(values["judge_kappa"]) if values["judge_kappa"] is not None else None
    except ValueError:
        values["judge_kappa"] = None
    return LabelProvenance(**values)
