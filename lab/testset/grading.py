"""Grading a sheet one row at a time: the state behind ``lab testset grade`` (no HTTP here; lab.testset.grade_server
serves it).

Sheets (:func:`read_sheet`)
- An annotation sheet (``lab testset export-annotation``: qid, query, unit_id, passage, grade, tier, note): each row
  gets a grade 0-3 (:data:`ANNOTATION_SCALE`). A review sheet (``lab testset export-review``: qid, unit_id, passage,
  evidence, question, answer, verdict, fixed_question, grade, note): each row gets a verdict keep / fix / drop
  (:data:`REVIEW_SCALE`; fix needs the corrected question). Any other CSV is refused before anything is served.
- A row is graded when its grade (annotation) or verdict (review) is filled. Rows are shown in the sheet's order,
  which export-annotation already shuffled per query with its seed; no column beyond the query, the passage (and
  for a review the question, answer and evidence) and the grader's own grade and note reaches the page, so a
  judge's or another grader's grade is never shown.
- Every change rewrites the whole file atomically (lab.core.atomic: a temporary file, fsync, rename), so a killed
  server or a closed tab loses at most the keystroke in flight and never leaves half a sheet. The file is written
  back as export wrote it: UTF-8 with a byte-order mark, comma-separated, the original columns in their order.

Two graders and an arbiter (annotation sheets only)
- ``--grader NAME`` grades ``<sheet stem>.grader-NAME.csv`` (:func:`grader_path`), a copy of the sheet made on the
  first start with grade, tier and note cleared, so each grader sees only their own grades.
- ``--arbitrate`` reads the two grader files next to the sheet, and shows the rows both graded and graded
  differently, with both grades; the arbiter's grades go to ``<sheet stem>.arbiter.csv`` (:func:`arbiter_path`,
  again a cleared copy of the sheet). lab.testset.graders turns the three files into qrels.

Pace (:func:`pace`): seconds per grade is the median gap between consecutive grades made since the page was
opened (gaps over :data:`IDLE_GAP` seconds, a pause, are left out); the time left is that times the rows left.
"""
from __future__ import annotations

import csv
import io
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import Stemmer

from lab.core.atomic import atomic_path
from lab.core.errors import ConfigError, DataError
from lab.testset.io import read_csv
from lab.text.tokenize import HAN_CHARS, NLTK_STOPWORDS

ANNOTATION, REVIEW = "annotation", "review"
#: The 0-3 scale of an annotation sheet (lab.testset.annotate), shown on the page.
ANNOTATION_SCALE = {"0": "not relevant: does not help answer the question",
                    "1": "partly: on the topic, or a piece of the answer",
                    "2": "relevant: answers it in part, or needs another passage too",
                    "3": "answers it fully"}
#: The verdicts of a review sheet (lab.testset.spotcheck), shown on the page; the key is the first letter.
REVIEW_SCALE = {"keep": "the question is good, and the passage answers it",
                "fix": "the passage answers it, but the question needs rewording (type the corrected question)",
                "drop": "a bad question: unanswerable from the passage, vague, or wrong"}
#: Columns a sheet of each kind must have.
REQUIRED = {ANNOTATION: ("qid", "unit_id", "passage", "grade"), REVIEW: ("qid", "unit_id", "question", "verdict")}
#: Seconds between two grades above which the grader is taken to have paused (left out of the pace).
IDLE_GAP = 300.0
#: A passage longer than this many characters opens at its best-matching window.
WINDOW_CHARS = 1200
GRADER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,39}")

_WORD = re.compile(f"[^\\W{HAN_CHARS}]+")
_HAN = re.compile(f"[{HAN_CHARS}]+")


@dataclass
class Sheet:
    """A sheet in memory: its kind, columns (as in the file) and rows (every column a string)."""

    path: Path
    kind: str
    columns: list[str]
    rows: list[dict[str, str]]
    lines: list[str] | None = field(default=None, repr=False)  # each row as written (CSV), kept by write_sheet

    def keys(self) -> list[tuple[str, str]]:
        """(qid, unit_id) of each row, in order."""
        return [(r["qid"], r["unit_id"]) for r in self.rows]

    def graded(self, i: int) -> bool:
        return bool(self.rows[i].get("grade" if self.kind == ANNOTATION else "verdict", "").strip())


def sheet_kind(columns: list[str]) -> str | None:
    """"annotation", "review" or None from a header (lower-cased names)."""
    for kind in (REVIEW, ANNOTATION):  # a review sheet also has the columns of an annotation sheet
        if all(c in columns for c in REQUIRED[kind]):
            return kind
    return None


def read_sheet(path: str | Path) -> Sheet:
    """The sheet at ``path``; a one-line error when it is missing or is neither an annotation nor a review sheet."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no such file; give a sheet written by `lab testset export-annotation` or "
                          "`lab testset export-review`")
    rows = [rec for _, rec in read_csv(path, what="sheet")]
    with open(path, encoding="utf-8-sig", newline="") as fh:
        first = fh.readline()
    delimiter = max((",", ";", "\t"), key=first.count) if first else ","
    columns = [c.strip().lower() for c in next(csv.reader([first], delimiter=delimiter), [])]
    kind = sheet_kind(columns)
    if kind is None:
        raise DataError(path, f"not an annotation sheet (columns {', '.join(REQUIRED[ANNOTATION])}) nor a review "
                              f"sheet (columns {', '.join(REQUIRED[REVIEW])}); its columns are {', '.join(columns)}",
                        line=1, hint="grade a sheet written by `lab testset export-annotation` or `export-review`")
    for i, r in enumerate(rows):
        if not r.get("qid", "").strip():
            raise DataError(path, "empty qid", line=i + 2, field="qid", hint="do not edit the qid column")
    return Sheet(path, kind, columns, rows)


def _csv_line(cells: list[str]) -> str:
    buf = io.StringIO()
    csv.writer(buf).writerow(cells)
    return buf.getvalue()


def write_sheet(sheet: Sheet, changed: int | None = None) -> None:
    """Rewrite the sheet atomically, UTF-8 with BOM, its columns in order (see the module docstring). With
    ``changed`` (a row index) only that row is serialised again; the others come from ``sheet.lines`` (a sheet of
    whole documents is megabytes of CSV, and a grade changes one row)."""
    if sheet.lines is None or changed is None or len(sheet.lines) != len(sheet.rows) + 1:
        sheet.lines = [_csv_line(sheet.columns)] + [_csv_line([r.get(c, "") for c in sheet.columns])
                                                     for r in sheet.rows]
    else:
        sheet.lines[changed + 1] = _csv_line([sheet.rows[changed].get(c, "") for c in sheet.columns])
    with atomic_path(sheet.path) as tmp:
        with open(tmp, "w", encoding="utf-8-sig", newline="") as fh:
            fh.write("".join(sheet.lines))


def blank_copy(sheet: Sheet, path: Path) -> Sheet:
    """A copy of an annotation sheet at ``path`` with grade, tier and note cleared (written at once)."""
    cleared = {"grade", "tier", "note"}
    out = Sheet(path, sheet.kind, list(sheet.columns),
                [{c: ("" if c in cleared else v) for c, v in r.items()} for r in sheet.rows])
    write_sheet(out)
    return out


def check_grader_name(name: str) -> str:
    if not GRADER_NAME.fullmatch(name or ""):
        raise ConfigError(f"--grader {name!r}: a name of letters, digits, '.', '_' or '-' (at most 40), e.g. "
                          "--grader alice")
    return name


def grader_path(sheet: str | Path, name: str) -> Path:
    """``<stem>.grader-<name>.csv`` beside the sheet."""
    sheet = Path(sheet)
    return sheet.with_name(f"{sheet.stem}.grader-{check_grader_name(name)}{sheet.suffix or '.csv'}")


def arbiter_path(sheet: str | Path) -> Path:
    """``<stem>.arbiter.csv`` beside the sheet."""
    sheet = Path(sheet)
    return sheet.with_name(f"{sheet.stem}.arbiter{sheet.suffix or '.csv'}")


def grader_files(sheet: str | Path) -> dict[str, Path]:
    """{grader name: file} of the grader files beside the sheet, by name."""
    sheet = Path(sheet)
    prefix, suffix = f"{sheet.stem}.grader-", sheet.suffix or ".csv"
    found = {p.name[len(prefix):-len(suffix)]: p for p in sheet.parent.glob(f"{prefix}*{suffix}")}
    return dict(sorted(found.items()))


def same_rows(a: Sheet, b: Sheet) -> None:
    """A one-line error when two sheets do not hold the same (qid, unit_id) rows."""
    ka, kb = a.keys(), b.keys()
    if len(set(ka)) != len(ka):
        raise DataError(a.path, "a (qid, unit_id) row appears twice", field="unit_id", hint="keep one row per pair")
    if set(ka) != set(kb):
        only_a, only_b = sorted(set(ka) - set(kb)), sorted(set(kb) - set(ka))
        what = (f"{len(only_a)} rows only in {a.path.name} (first {only_a[0]})" if only_a else "") + \
               ("; " if only_a and only_b else "") + \
               (f"{len(only_b)} rows only in {b.path.name} (first {only_b[0]})" if only_b else "")
        raise DataError(b.path, f"does not hold the same rows as {a.path}: {what}", field="unit_id",
                        hint="both graders must grade copies of the same exported sheet")


def int_grade(value: str) -> int | None:
    """A 0-3 grade from a cell, None when empty or not one."""
    try:
        g = float(value.strip())
    except ValueError:
        return None
    return int(g) if g.is_integer() and 0 <= g <= 3 else None


# ------------------------------------------------------------------------------------------------ the text shown
def query_terms(query: str) -> tuple[set[str], set[str]]:
    """(stems of the query's words less stopwords, Han bigrams and single Han characters of its Han runs)."""
    stem = Stemmer.Stemmer("english")
    words = {stem.stemWord(w) for w in _WORD.findall(query.lower()) if w not in NLTK_STOPWORDS and len(w) > 1}
    han: set[str] = set()
    for run in _HAN.findall(query):
        han.update(run[i:i + 2] for i in range(len(run) - 1)) if len(run) > 1 else han.add(run)
    return words, han


def term_spans(text: str, query: str) -> list[tuple[int, int]]:
    """[start, end) spans of ``text`` to mark: words whose stem is a query word's stem, and the query's Han bigrams
    (single Han characters for a one-character run), in order, not overlapping."""
    words, han = query_terms(query)
    stem = Stemmer.Stemmer("english")
    spans = [(m.start(), m.end()) for m in _WORD.finditer(text) if stem.stemWord(m.group().lower()) in words]
    for run in _HAN.finditer(text):
        s = run.group()
        for i in range(len(s)):
            for n in (2, 1):
                if s[i:i + n] in han and len(s[i:i + n]) == n:
                    spans.append((run.start() + i, run.start() + i + n))
                    break
    spans.sort()
    out: list[tuple[int, int]] = []
    for a, b in spans:
        if out and a < out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def best_window(text: str, spans: list[tuple[int, int]], size: int = WINDOW_CHARS) -> tuple[int, int]:
    """[start, end) of the ``size``-character window of ``text`` holding the most marked spans (distinct marked
    strings count first, then all marks), widened to word boundaries; the whole text when it is short."""
    if len(text) <= size * 1.25:
        return 0, len(text)
    best, best_score = 0, (-1, -1)
    step = max(1, size // 6)
    for start in range(0, max(1, len(text) - size + step), step):
        inside = [text[a:b].lower() for a, b in spans if a >= start and b <= start + size]
        score = (len(set(inside)), len(inside))
        if score > best_score:
            best, best_score = start, score
    end = min(len(text), best + size)
    while best > 0 and not text[best - 1].isspace() and best > end - size - 40:
        best -= 1
    while end < len(text) and not text[end].isspace() and end < best + size + 40:
        end += 1
    return best, end


# ------------------------------------------------------------------------------------------------ grading state
def pace(times: list[float], left: int, idle_gap: float = IDLE_GAP) -> dict[str, Any]:
    """{seconds_per_grade, per_hour, seconds_left} from the times (seconds) of the grades made since the page was
    opened; None values
    until two grades less than ``idle_gap`` apart were made."""
    gaps = [b - a for a, b in zip(times, times[1:], strict=False) if 0 <= b - a <= idle_gap]
    if not gaps:
        return {"seconds_per_grade": None, "per_hour": None, "seconds_left": None}
    per = max(statistics.median(gaps), 0.1)
    return {"seconds_per_grade": per, "per_hour": 3600.0 / per, "seconds_left": per * left}


@dataclass
class Grading:
    """What one page grades: ``sheet`` (the file grades go to), ``order`` (indices of the rows shown, in the
    sheet's order), ``others`` (arbitration: {row index: {grader: grade}}), ``times`` (the grades made since the page
    was opened)."""

    sheet: Sheet
    mode: str  # "annotation", "review" or "arbitrate"
    order: list[int]
    others: dict[int, dict[str, int]] = field(default_factory=dict)
    grader: str | None = None
    times: list[float] = field(default_factory=list)

    @property
    def total(self) -> int:
        return len(self.order)

    def graded_count(self) -> int:
        return sum(self.sheet.graded(i) for i in self.order)

    def first_ungraded(self) -> int | None:
        """Position (in ``order``) of the first row not graded yet, None when every row is."""
        return next((p for p, i in enumerate(self.order) if not self.sheet.graded(i)), None)

    def _index(self, pos: int) -> int:
        if not 0 <= pos < len(self.order):
            raise ConfigError(f"row {pos + 1}: the sheet shows rows 1 to {len(self.order)}")
        return self.order[pos]

    def view(self, pos: int) -> dict[str, Any]:
        """What the page shows for position ``pos``: the texts with their marks and window, the grader's own
        grade / verdict and note, and in arbitration the two graders' grades (nothing else of the row)."""
        r = self.sheet.rows[self._index(pos)]
        query = r.get("question" if self.sheet.kind == REVIEW else "query", "")
        passage = r.get("passage", "")
        spans = term_spans(passage, query)
        lo, hi = best_window(passage, spans)
        out = {"position": pos, "qid": r.get("qid", ""), "query": query, "passage": passage,
               "marks": [list(s) for s in spans], "window": [lo, hi],
               "grade": r.get("grade", "").strip(), "note": r.get("note", "")}
        if self.sheet.kind == REVIEW:
            out.update(answer=r.get("answer", ""), evidence=r.get("evidence", ""),
                       verdict=r.get("verdict", "").strip(), fixed_question=r.get("fixed_question", ""))
        if self.mode == "arbitrate":
            out["others"] = self.others.get(self._index(pos), {})
        return out

    def status(self, now: float | None = None) -> dict[str, Any]:
        done = self.graded_count()
        return {"mode": self.mode, "kind": self.sheet.kind, "sheet": self.sheet.path.name, "grader": self.grader,
                "total": self.total, "graded": done, "next": self.first_ungraded(),
                "pace": pace(self.times, self.total - done),
                "scale": ANNOTATION_SCALE if self.sheet.kind == ANNOTATION else REVIEW_SCALE}

    def grade(self, pos: int, value: str, now: float, fixed_question: str | None = None) -> None:
        """Record a grade (annotation: "0".."3") or verdict (review: keep / fix / drop) for ``pos`` and write the
        sheet at once."""
        r = self.sheet.rows[self._index(pos)]
        if self.sheet.kind == ANNOTATION:
            if value not in ANNOTATION_SCALE:
                raise ConfigError(f"grade {value!r}: one of 0, 1, 2, 3")
            r["grade"] = value
            if int(value) < 1 and "tier" in r:
                r["tier"] = ""  # a tier qualifies relevant rows only (import-annotation refuses it otherwise)
        else:
            if value not in REVIEW_SCALE:
                raise ConfigError(f"verdict {value!r}: one of {', '.join(REVIEW_SCALE)}")
            fixed = " ".join((fixed_question or r.get("fixed_question", "")).split())
            if value == "fix" and not fixed:
                raise ConfigError("verdict fix needs the corrected question")
            r["verdict"] = value
            if "fixed_question" in r or value == "fix":
                r["fixed_question"] = fixed if value == "fix" else ""
        write_sheet(self.sheet, changed=self._index(pos))
        self.times.append(now)

    def note(self, pos: int, text: str) -> None:
        """Set the note of ``pos`` (one line) and write the sheet at once."""
        self.sheet.rows[self._index(pos)]["note"] = " ".join(text.split())
        if "note" not in self.sheet.columns:
            self.sheet.columns.append("note")
            self.sheet.lines = None
        write_sheet(self.sheet, changed=self._index(pos))


def open_grading(sheet_path: str | Path, grader: str | None = None, arbitrate: bool = False) -> Grading:
    """The :class:`Grading` of ``lab testset grade SHEET [--grader NAME | --arbitrate]`` (module docstring); one-line
    errors for a sheet of the wrong kind, grader files that do not hold the sheet's rows, or not two graders."""
    sheet = read_sheet(sheet_path)
    if grader is not None and arbitrate:
        raise ConfigError("--grader and --arbitrate: give one (the arbiter is a third person; their grades go to "
                          f"{arbiter_path(sheet.path).name})")
    if (grader is not None or arbitrate) and sheet.kind != ANNOTATION:
        raise ConfigError(f"{sheet.path}: --grader and --arbitrate work on annotation sheets "
                          "(export-annotation); a review sheet is graded by one reviewer")
    if grader is not None:
        path = grader_path(sheet.path, grader)
        own = read_sheet(path) if path.is_file() else blank_copy(sheet, path)
        same_rows(sheet, own)
        return Grading(own, ANNOTATION, list(range(len(own.rows))), grader=grader)
    if not arbitrate:
        return Grading(sheet, sheet.kind, list(range(len(sheet.rows))))
    files = grader_files(sheet.path)
    if len(files) != 2:
        have = ", ".join(p.name for p in files.values()) or "none"
        raise ConfigError(f"--arbitrate needs the files of two graders beside {sheet.path} "
                          f"({sheet.path.stem}.grader-NAME.csv, written by `lab testset grade {sheet.path.name} "
                          f"--grader NAME`); found {len(files)}: {have}")
    (na, pa), (nb, pb) = files.items()
    a, b = read_sheet(pa), read_sheet(pb)
    same_rows(sheet, a)
    same_rows(a, b)
    path = arbiter_path(sheet.path)
    arb = read_sheet(path) if path.is_file() else blank_copy(sheet, path)
    same_rows(sheet, arb)
    ga = {k: int_grade(r.get("grade", "")) for k, r in zip(a.keys(), a.rows, strict=True)}
    gb = {k: int_grade(r.get("grade", "")) for k, r in zip(b.keys(), b.rows, strict=True)}
    order, others = [], {}
    for i, k in enumerate(arb.keys()):
        if ga[k] is not None and gb[k] is not None and ga[k] != gb[k]:
            order.append(i)
            others[i] = {na: ga[k], nb: gb[k]}
    return Grading(arb, "arbitrate", order, others=others, grader="arbiter")
