"""A generation's output folder: what defines a run (``generation.json``), what it writes, and the checks that keep
``--force`` and ``--resume`` from mixing two runs."""
from __future__ import annotations

import json
import shutil
from dataclasses import asdict
from pathlib import Path
from typing import Mapping

from lab.core.errors import ConfigError
from lab.testset.generation_config import GenerationConfig
from lab.testset.io import (
    write_text_atomic,
)
from lab.testset.qa_prompt import PROMPT_VERSION

#: What defines a generation, written first into its folder (see module conventions).
REQUEST_FILE = "generation.json"


#: What a generation writes into its folder; ``force`` removes these, and nothing else, before writing.
SET_FILES = ("corpus.jsonl", "queries.jsonl", "qrels", "evidence.jsonl", "candidates.jsonl", "gate_report.json",
             "provenance.json", REQUEST_FILE)


#: Params that do not change which questions pass: a resumed run may change them.
_NOT_DEFINING = ("n", "max_attempts", "batch_size", "max_consecutive_failures")


def held_files(folder: str | Path) -> list[str]:
    """The names of :data:`SET_FILES` that ``folder`` holds (empty when it holds no set, or does not exist)."""
    folder = Path(folder)
    return [name for name in SET_FILES if (folder / name).exists()]


def defining_params(cfg: GenerationConfig) -> dict:
    """The params of ``cfg`` that can change which questions pass (see module conventions)."""
    return {k: v for k, v in plain_json(asdict(cfg)).items() if k not in _NOT_DEFINING}


def read_request(folder: str | Path) -> dict:
    """``generation.json`` of a set folder; ConfigError when there is none or it is not JSON."""
    path = Path(folder) / REQUEST_FILE
    if not path.is_file():
        raise ConfigError(f"{folder}: holds {', '.join(held_files(folder))} but no {REQUEST_FILE}, so there is "
                          "nothing to resume (made by an older lab, or not by lab testset generate); pass --force "
                          "to replace it, or choose another --out")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path}, line {e.lineno}: malformed JSON ({e.msg}); pass --force to start over") from None


def _first_difference(path: Path, held: Mapping, asked: Mapping, prefix: str = "") -> None:
    """ConfigError naming the first field where ``held`` (the folder's request) and ``asked`` differ."""
    for key in sorted(set(held) | set(asked)):
        a, b = held.get(key), asked.get(key)
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            _first_difference(path, a, b, f"{prefix}{key}.")
        elif a != b:
            raise ConfigError(f"{path}, field '{prefix}{key}': the set was made with {a!r}, this run asks for "
                              f"{b!r}; resume with the same settings, or pass --force to start over")


def check_out_folder(out: str | Path, cfg: GenerationConfig, *, force: bool = False,
                     resume: bool = False) -> dict | None:
    """Before any work: refuse a folder that holds a set unless ``force`` or ``resume`` (ConfigError, one line);
    with ``resume``, the folder's request (returned) must have the same defining params as ``cfg``. None when
    there is nothing to resume."""
    if force and resume:
        raise ConfigError("--force and --resume: pass one (--force replaces the set, --resume continues it)")
    held = held_files(out)
    if not held or force:
        return None
    if not resume:
        raise ConfigError(f"{out}: holds a test set ({', '.join(held)}); pass --resume to continue it, --force to "
                          "replace it, or choose another --out")
    request = read_request(out)
    _first_difference(Path(out) / REQUEST_FILE, {"params": request.get("params", {})}, {"params": defining_params(cfg)})
    return request


def generation_request(units_described: Mapping, llm_identity: str, cfg: GenerationConfig) -> dict:
    """What defines a generation (``generation.json``; see module conventions)."""
    return {"source_dataset": units_described["source_dataset"],
            "source_fingerprint": units_described["source_fingerprint"],
            "units_fingerprint": units_described["units_fingerprint"], "chunking": units_described["chunking"],
            "llm": llm_identity, "prompt_version": PROMPT_VERSION, "params": defining_params(cfg)}


def start_folder(out: str | Path, request: dict, resumed: dict | None, force: bool) -> Path:
    """Make ``out`` ready once the model is loaded: a resumed request must match ``request`` field by field;
    ``force`` removes :data:`SET_FILES`; then ``generation.json`` is written."""
    folder = Path(out)
    if resumed is not None:
        _first_difference(folder / REQUEST_FILE, resumed, request)
    if force:
        for name in held_files(folder):
            target = folder / name
            shutil.rmtree(target) if target.is_dir() else target.unlink()
    folder.mkdir(parents=True, exist_ok=True)
    write_text_atomic(folder / REQUEST_FILE, json.dumps(request, indent=1, ensure_ascii=False) + "\n")
    return folder


def plain_json(d: Mapping) -> dict:
    return json.loads(json.dumps(d, default=str))
