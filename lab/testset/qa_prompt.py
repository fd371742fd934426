"""The question writer's prompt: the typed instructions per language and question type, the answer schema (a
llama.cpp grammar for a local model), the passage as the model sees it, and parsing its answer back."""
from __future__ import annotations

import hashlib
import json
import random
import re
from typing import Any

PROMPT_VERSION = "passage-question-answer-typed-v3"  # v3: the answer may not hold a question mark (qa_schema)


PROMPTS = {
    "zh": ("给定以下文档段落，生成一个用户可能会问的、恰好需要这段信息才能回答的问题。\n"
           "要求：\n"
           "1. 问题必须依赖该段落中的具体信息，不是泛泛提问\n"
           "2. 问题不能直接包含段落中的关键词（增加检索难度）\n"
           "3. {instruction}\n"
           "4. 输出格式：{{\"question\": \"...\", \"answer\": \"...\"}}\n\n"
           "文档段落：\n{passage}"),
    "en": ("Given the following document passage, write one question that a user might ask and that needs exactly "
           "the information in this passage to be answered.\n"
           "Requirements:\n"
           "1. The question must depend on specific information in the passage; it must not be a generic question.\n"
           "2. The question must not directly contain the key words of the passage (to make retrieval harder).\n"
           "3. {instruction}\n"
           "4. Output format: {{\"question\": \"...\", \"answer\": \"...\"}}\n\n"
           "Passage:\n{passage}"),
}


#: Question types and the target mix: how many of every 20 candidates ask each type (25% what, 25% how, 15% why,
#: 10% when, 15% which/compare, 10% troubleshooting), so a set is not 16 of 20 "What is the purpose of".
QUESTION_MIX = {"what": 5, "how": 5, "why": 3, "when": 2, "which": 3, "troubleshooting": 2}


TYPE_INSTRUCTIONS = {
    "en": {"what": 'Ask a "What" question about a specific fact, definition or value the passage states.',
           "how": 'Ask a "How" question about how to do something, or how something works, as the passage '
                  'describes it.',
           "why": 'Ask a "Why" question about a reason, cause or purpose the passage explains.',
           "when": 'Ask a "When" question about the condition, situation or order in which something happens or '
                   'should be used.',
           "which": 'Ask a "Which" question that compares or chooses between options, settings or alternatives '
                    'the passage names.',
           "troubleshooting": "Ask a troubleshooting question: a user meets a problem or an error, and the passage "
                              "holds its cause or its fix."},
    "zh": {"what": "提一个“什么”类问题：询问段落中的具体事实、定义或数值。",
           "how": "提一个“如何/怎样”类问题：询问如何做某事，或某事如何工作。",
           "why": "提一个“为什么”类问题：询问段落解释的原因或目的。",
           "when": "提一个“何时/在什么情况下”类问题：询问某事发生或应当使用的条件、时机或顺序。",
           "which": "提一个“哪个/哪种”类问题：在段落提到的选项、设置或方案之间比较或选择。",
           "troubleshooting": "提一个排障问题：用户遇到了问题或错误，段落给出原因或解决办法。"},
}


#: The first word an English question of each type starts with (the schema's pattern holds it to that).
_TYPE_STARTS = {"what": "What", "how": "How", "why": "Why", "when": "When", "which": "Which",
                "troubleshooting": "How|Why|What"}


def question_type(index: int, round_: int, seed: int = 0) -> str:
    """The type candidate ``index`` (of round ``round_``) asks: the :data:`QUESTION_MIX` cycle of 20, shuffled
    by ``seed``, read at ``index + round_`` (a passage visited again in a later round gets another type)."""
    cycle = [t for t, k in QUESTION_MIX.items() for _ in range(k)]
    random.Random(seed).shuffle(cycle)
    return cycle[(index + round_) % len(cycle)]


JUDGE_VERSION = "judge-v1"


JUDGE_PROMPTS = {
    "en": ("Passage:\n{passage}\n\nQuestion: {question}\n\nCan the question be answered using only the passage? "
           "Reply with one word: yes or no."),
    "zh": "文档段落：\n{passage}\n\n问题：{question}\n\n仅根据该段落能回答这个问题吗？只回答一个字：是 或 否。",
}


_QUESTION_PATTERNS = {
    "en": r"^(What|How|Which|Why|When|Where|Who|Can|Does|Do|Is|Are|Should) [^?\n]{10,150}[?]$",
    "zh": r"^[^?？\n]{4,80}[?？]$",
}


_ANSWER_PATTERN = r"^[^?？]{1,120}$"


def qa_schema(language: str = "en", qtype: str | None = None, write_first: str = "question") -> dict:
    """The JSON schema sent with ``json_mode="schema"``: {answer, question}, the question shaped as a question
    (English: starts with an interrogative, ends with "?"; Chinese: ends with "？"), the answer at most 120
    characters (a small model otherwise loops until max_tokens; 120 rather than 200 cut the tokens per answer and
    kept the yield, docs/results.md) with no question mark: SmolLM2-135M's commonest
    accepted failure on the SQLite docs was an answer that was itself a question, copied as the question (33 of
    100; :func:`lab.testset.gates.non_answer` drops those that get through). The question comes first by default
    (``write_first``, :data:`WRITE_FIRST`); ``write_first="answer"`` puts the answer first. Key order does not
    matter to :func:`parse_qa`. ``qtype`` (English): the question starts with that type's word
    (:data:`_TYPE_STARTS`)."""
    pattern = _QUESTION_PATTERNS["zh" if language == "zh" else "en"]
    if qtype in _TYPE_STARTS and language != "zh":
        pattern = f"^({_TYPE_STARTS[qtype]}) " + pattern.split(") ", 1)[1]
    fields = {"answer": {"type": "string", "minLength": 1, "maxLength": 120, "pattern": _ANSWER_PATTERN},
              "question": {"type": "string", "pattern": pattern}}
    order = ["answer", "question"] if write_first == "answer" else ["question", "answer"]
    return {"type": "object", "properties": {k: fields[k] for k in order}, "required": order,
            "additionalProperties": False}


def build_prompt(passage: str, language: str = "en", max_chars: int | None = None, qtype: str = "what") -> str:
    """The prompt around ``passage`` (cut to ``max_chars`` at a line or word boundary when longer), asking for a
    question of type ``qtype`` (:data:`QUESTION_MIX`)."""
    lang = "zh" if language == "zh" else "en"
    return PROMPTS[lang].format(passage=shown_passage(passage, max_chars), instruction=TYPE_INSTRUCTIONS[lang][qtype])


def shown_passage(passage: str, max_chars: int | None) -> str:
    """``passage`` cut to at most ``max_chars`` characters, at the last line break or space in the last fifth."""
    passage = passage.strip()
    if not max_chars or len(passage) <= max_chars:
        return passage
    cut = passage[:max_chars]
    brk = max(cut.rfind("\n"), cut.rfind(" "))
    return cut[:brk] if brk >= int(max_chars * 0.8) else cut


def prompt_sha() -> dict:
    """sha256 (16 hex) of each prompt text and of the schema: a prompt edit without a version bump shows."""
    h = lambda s: hashlib.sha256(s.encode("utf-8")).hexdigest()[:16]  # noqa: E731
    return {**{f"qa_{k}": h(v) for k, v in PROMPTS.items()}, **{f"judge_{k}": h(v) for k, v in JUDGE_PROMPTS.items()},
            **{f"types_{k}": h(json.dumps(v, sort_keys=True)) for k, v in TYPE_INSTRUCTIONS.items()},
            **{f"schema_{k}": h(json.dumps([qa_schema(k, t) for t in QUESTION_MIX], sort_keys=True))
               for k in ("en", "zh")}}


_FENCE = re.compile(r"^```[a-zA-Z]*\s*|\s*```$")


_KV = re.compile(r'["\']?(question|answer)["\']?\s*[:：]\s*"((?:[^"\\]|\\.)*)"?', re.IGNORECASE | re.DOTALL)


_PLAIN = re.compile(r"(?:^|\n)\s*\**(?:Q|Question|问题)\**\s*[:：]\s*(?P<q>.+?)\s*(?:\n\s*)+"
                    r"\**(?:A|Answer|答案|回答)\**\s*[:：]\s*(?P<a>.+?)\s*(?:\n\s*\n|$)", re.IGNORECASE | re.DOTALL)


def _qa_from(obj: Any) -> dict | None:
    if isinstance(obj, dict):
        q, a = obj.get("question"), obj.get("answer")
        if isinstance(q, str) and isinstance(a, str) and q.strip():
            return {"question": q.strip(), "answer": a.strip()}
    return None


def parse_qa(text: str) -> tuple[dict | None, bool]:
    """({"question", "answer"} or None, repaired).

    Strict: the whole text (surrounding whitespace aside) is one JSON object with string fields question
    (non-empty) and answer. Otherwise one lenient repair: code fences dropped, the outermost {...} taken, curly
    quotes straightened, trailing commas removed, then JSON; failing that, "question": "..." / "answer": "..."
    pairs read by pattern (an unterminated string is taken to the end); failing that, "Question: ...\\nAnswer:
    ..." lines. ``repaired`` is True when only the repair parsed it."""
    try:
        got = _qa_from(json.loads(text.strip()))
        if got:
            return got, False
    except (json.JSONDecodeError, ValueError):
        pass
    t = _FENCE.sub("", text.strip())
    t = t.replace("\u201c", '"').replace("\u201d", '"').replace("\u2018", "'").replace("\u2019", "'")
    a, b = t.find("{"), t.rfind("}")
    if a >= 0 and b > a:
        body = re.sub(r",\s*([}\]])", r"\1", t[a:b + 1])
        try:
            got = _qa_from(json.loads(body))
            if got:
                return got, True
        except (json.JSONDecodeError, ValueError):
            pass
    pairs = {}
    for m in _KV.finditer(t):
        pairs.setdefault(m.group(1).lower(), m.group(2))
    if "question" in pairs and "answer" in pairs:
        try:
            got = _qa_from({k: json.loads(f'"{v}"') for k, v in pairs.items()})
        except json.JSONDecodeError:
            got = _qa_from(pairs)
        if got:
            return got, True
    m = _PLAIN.search(t)
    if m:
        return _qa_from({"question": m.group("q"), "answer": m.group("a")}), True
    return None, False


def parse_yes_no(text: str) -> bool | None:
    """True / False from a judge's reply (yes/no, 是/否, true/false as the first word); None when unclear."""
    t = text.strip().lower().lstrip("*\"' ")
    if t.startswith(("yes", "是", "true", "可以", "能")):
        return True
    if t.startswith(("no", "否", "false", "不")):
        return False
    return None
