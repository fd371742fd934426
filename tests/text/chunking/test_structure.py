"""lab.text.chunking.structure: the sentence splitter in English and Chinese."""
from __future__ import annotations

from lab.text.chunking import sentences


def test_sentence_splitter_english_and_chinese():
    en = "We used mice (Smith et al. 2001). Results were e.g. good. P < 0.05. the end was near! Fig. 2 shows it."
    got = [en[s:e] for s, e in sentences(en)]
    assert got == ["We used mice (Smith et al. 2001).", "Results were e.g. good.",
                   "P < 0.05. the end was near!", "Fig. 2 shows it."]
    zh = "今天天气很好。我们去公园散步吧！你觉得怎么样？他说：“好的。”然后出发了；大家都很开心。"
    got = [zh[s:e] for s, e in sentences(zh)]
    assert got == ["今天天气很好。", "我们去公园散步吧！", "你觉得怎么样？", "他说：“好的。”", "然后出发了；",
                   "大家都很开心。"]
