"""lab.testset.set_folder: a folder that holds a set is refused unless --force or --resume, a resume must ask for the
same defining params (the first field that differs is named), and only the set's own files count."""
from __future__ import annotations

import json

import pytest

from lab.core.errors import ConfigError
from lab.testset.generate import GenerationConfig
from lab.testset.set_folder import (
    REQUEST_FILE,
    check_out_folder,
    defining_params,
    generation_request,
    held_files,
    start_folder,
)


def test_a_held_set_is_refused_and_a_resume_must_ask_the_same(tmp_path):
    cfg = GenerationConfig(n=3, seed=0)
    assert held_files(tmp_path / "none") == [] and check_out_folder(tmp_path / "none", cfg) is None
    out = tmp_path / "set"
    units = {"source_dataset": "d", "source_fingerprint": "f", "units_fingerprint": "u",
             "chunking": {"chunker": "none"}}
    request = generation_request(units, "gguf:m@sha256:0", cfg)
    assert "n" not in request["params"] and request["params"] == defining_params(cfg)  # n does not define a set
    start_folder(out, request, None, force=False)
    (out / "notes.txt").write_text("mine", encoding="utf-8")
    assert held_files(out) == [REQUEST_FILE]  # the user's own files are not the set's
    with pytest.raises(ConfigError, match=r"holds a test set \(generation.json\); pass --resume"):
        check_out_folder(out, cfg)
    with pytest.raises(ConfigError, match="pass one"):
        check_out_folder(out, cfg, force=True, resume=True)
    assert check_out_folder(out, cfg, force=True) is None
    assert check_out_folder(out, GenerationConfig(n=50, seed=0), resume=True) == json.loads(
        (out / REQUEST_FILE).read_text(encoding="utf-8"))  # a bigger n may continue the set
    with pytest.raises(ConfigError, match=r"field 'params.seed': the set was made with 0, this run asks for 1"):
        check_out_folder(out, GenerationConfig(n=3, seed=1), resume=True)
