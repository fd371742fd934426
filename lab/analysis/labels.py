"""Short, readable names of configurations for plots: only what varies, e.g.
"rerank · biencoder MiniLM · α 0.5 · top 50".

Conventions
- Input: one label per configuration in the ``key=value, key=value`` form that lab.workbench.config.label and
  lab.analysis.compare.experiment_leaderboard write ("strategy=rerank, params.reranker=biencoder, params.alpha=0.5"),
  or mappings of dotted keys to values. Labels without ``=`` are names already and are kept as they are.
- Only keys whose value differs between the configurations are shown (a key some configurations lack counts as
  varying, and is shown where present); empty values (``{}``, ``[]``, empty string) are left out.
- Order: the strategy first, then names (reranker, model, fusion, chunker, extractor...: bare values joined
  by a space, model names shortened: "all-MiniLM-L6-v2" -> "MiniLM"), then numbers as "name value" with short
  names (alpha -> α, top_n -> top). Parts are joined by " · ".
- A configuration whose varying keys are all absent (e.g. the plain baseline) is named by its strategy, else by
  its full label.
- One home: the charts (lab.analysis.plots), the text leaderboards of ``lab compare``, ``lab sweep`` and
  ``lab demo`` (lab.analysis.compare.format_leaderboard, through :func:`table_labels`) and the HTML report name
  configurations with :func:`short_labels`; the full label stays in the JSON outputs (key ``label``), in the
  report's tooltips (``title``) and behind ``lab compare --long-labels``.
"""
from __future__ import annotations

import re
from typing import Mapping, Sequence

SEPARATOR = " · "
#: Keys whose values are names, shown bare (in this order when several vary).
NAME_KEYS = ("strategy", "reranker", "model", "fusion", "chunker", "extractor", "retrievers", "expand",
             "encoder", "embedder", "llm")
#: Short display names of numeric keys.
SHORT_NAMES = {"alpha": "α", "top_n": "top", "size": "size", "overlap": "overlap", "k1": "k1", "b": "b",
               "rrf_k": "rrf k", "depth": "depth", "max_queries": "queries", "size_unit": "unit"}
_PAIR = re.compile(r"(?:^|,\s)([\w.\-/]+)=")
_EMPTY = ("{}", "[]", "", "None")


def parse_label(text: str) -> dict[str, str]:
    """``"a=1, b.c=x, y"`` -> ``{"a": "1", "b.c": "x, y"}`` (a value runs until the next ``, key=``)."""
    marks = list(_PAIR.finditer(text))
    out = {}
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        out[m.group(1)] = text[m.end():end]
    return out


def short_model(name: str) -> str:
    """A model's short name: the last path part without "all-", a "-L<n>" layer count or a "-v<n>" version."""
    base = str(name).rstrip("/").rsplit("/", 1)[-1]
    base = re.sub(r"^all-", "", base)
    base = re.sub(r"-v\d+(\.\d+)?$", "", base)
    base = re.sub(r"-L\d+(?=-|$)", "", base)
    return base or str(name)


def _value(key: str, value: str) -> str:
    leaf = key.rsplit(".", 1)[-1]
    if leaf in ("model", "encoder", "embedder") or leaf.endswith("_model"):
        return short_model(value)
    return value


def short_labels(labels: Sequence[str | Mapping]) -> list[str]:
    """Short labels of the configurations (see the module docstring), in the order given."""
    configs = [dict(lb) if isinstance(lb, Mapping) else (parse_label(lb) if "=" in str(lb) else None)
               for lb in labels]
    if not any(configs):
        return [str(lb) for lb in labels]
    parsed = [c or {} for c in configs]
    keys: list[str] = []
    for c in parsed:
        keys.extend(k for k in c if k not in keys)
    varying = [k for k in keys if len({str(c.get(k, "\0")) for c in parsed}) > 1]
    out = []
    for original, c in zip(labels, parsed, strict=True):
        if c == {} and not isinstance(original, Mapping):
            out.append(str(original))
            continue
        shown = {k: str(c[k]) for k in varying if k in c and str(c[k]) not in _EMPTY}
        names = [k for k in shown if k.rsplit(".", 1)[-1] in NAME_KEYS]
        names.sort(key=lambda k: NAME_KEYS.index(k.rsplit(".", 1)[-1]))
        parts = []
        if names and names[0] == "strategy":
            parts.append(shown["strategy"])
            names = names[1:]
        if names:
            parts.append(" ".join(_value(k, shown[k]) for k in names))
        for k in shown:
            if k in names or k == "strategy":
                continue
            leaf = k.rsplit(".", 1)[-1]
            parts.append(f"{SHORT_NAMES.get(leaf, leaf.replace('_', ' '))} {_value(k, shown[k])}")
        out.append(SEPARATOR.join(parts) or str(c.get("strategy") or original))
    return out


def clip(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters, "..." marking a cut."""
    return text if len(text) <= width else text[: width - 3] + "..."


def table_labels(labels: Sequence[str], long: bool = False, width: int = 60) -> list[str]:
    """The names of a text table's rows: :func:`short_labels` (``long``: the labels as given), each cut to
    ``width`` characters."""
    shown = [str(lb) for lb in labels] if long else short_labels([str(lb) for lb in labels])
    return [clip(s, width) for s in shown]
