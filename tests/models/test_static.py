"""lab.models.static: the model2vec-style static model distilled from the packaged MiniLM (slow: ~3 min here)."""
from __future__ import annotations

import numpy as np
import pytest

from lab.models.embedders import load_embedder


@pytest.mark.slow
def test_minilm_static_distils_once_and_ranks_sensibly(tmp_path):
    emb = load_embedder("minilm-static", cache_dir=tmp_path, progress=False)
    folders = list((tmp_path / "models").glob("static-*"))
    assert len(folders) == 1 and (folders[0] / "teacher.json").is_file()
    texts = ["aspirin lowers the risk of heart attack", "heart attack risk is reduced by aspirin",
             "the compiler places standard cells on the die"]
    v = emb.encode_passages(texts)
    assert v.shape == (3, 256) and v.dtype == np.float32
    assert np.allclose(np.linalg.norm(v, axis=1), 1, atol=1e-5)
    assert v[0] @ v[1] > v[0] @ v[2] + 0.2
    again = load_embedder("minilm-static", cache_dir=tmp_path, progress=False)  # read back, not distilled anew
    assert np.allclose(again.encode_queries(texts), v, atol=1e-6)
    assert "model2vec:minilm-static@" in emb.cache_identity("passage")
