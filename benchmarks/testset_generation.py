"""Speed of the offline question writer: accepted questions per minute and yield, per model and per number of
llama.cpp slots (``lab testset generate --llm MODEL --concurrency N``), on the same passages, LLM cache off.

    .venv/bin/python benchmarks/testset_generation.py [--dataset data/ord-qa] [--candidates 24]
        [--models local,qwen2.5-coder-0.5b] [--concurrency 1,8] [--threads N] [--retry-on parse,text_gates] [--smoke]

Each (model, slots) pair runs the whole generation (lab.testset.generate.generate_testset: sampling, the LLM,
every gate) over the first ``--candidates`` candidates of the seed's order (``n`` = ``max_attempts`` =
candidates, so every run checks the same passages), with a fresh LLM (no answer cache) and the model loaded
outside the timing (and one untimed candidate before all runs, so imports and the corpus are warm). It prints
one line per run: candidates, accepted, yield, wall seconds, candidates and
accepted questions per minute, generated tokens per second, backend errors; then the speed-up of each slot count
over the first. At several slots llama.cpp decodes the candidates in one batch, whose arithmetic depends on the
batch, so a candidate's text (and the yield) can differ between slot counts: compare yields over many
candidates, and accepted per minute as the figure that matters. An opt-in model that is not installed is
reported and skipped. On a machine shared with other jobs the walls measure the share of the CPU this process
got: print the load average with the figures (it is printed here).
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def run_one(dataset: str, model: str, slots: int, threads: int | None, candidates: int, seed: int, work: Path,
            embedder, retry_on: str = "text_gates", retries: int = 1) -> dict:
    """One generation of ``candidates`` candidates with ``model`` at ``slots`` slots (the gates' ``embedder``
    loaded once, outside the timings); its figures."""
    from lab.models.llm import LocalLLM, is_default_llm
    from lab.models.llm.factory import gguf_path
    from lab.testset.generate import GenerationConfig, generate_testset

    # an opt-in model's GGUF is assembled (once) under the usual cache; the answers are not cached
    path = None if is_default_llm(model) else gguf_path(model, os.environ.get("LAB_CACHE_DIR", ".cache"))
    llm = LocalLLM(path, cache_dir=None, concurrency=slots, threads=threads, progress=False, seed=seed)
    llm.complete("Hello", max_tokens=1)  # load the model outside the timing
    load0, t0 = os.getloadavg()[0], time.perf_counter()
    res = generate_testset(dataset, work / f"set-{slots}", llm=llm,
                           config=GenerationConfig(n=candidates, max_attempts=candidates, seed=seed,
                                                   retry_on=retry_on, retries=retries),
                           cache_dir=work / "cache", progress=False, tracking_root=None, force=True,
                           embedder=embedder)
    wall = time.perf_counter() - t0
    u, rep = llm.usage(), res.report
    llm.close()
    return {"model": model, "slots": slots, "calls": u["calls"], "retry_on": retry_on, "threads": llm.threads_used,
            "candidates": rep.candidates, "accepted": rep.accepted,
            "yield": rep.yield_rate, "wall": wall, "per_min": rep.candidates / wall * 60,
            "accepted_per_min": rep.accepted / wall * 60, "tok_s": u["completion_tokens"] / wall,
            "errors": int(rep.extra.get("llm_errors", 0)), "gate_retries": int(rep.extra.get("gate_retries", 0)),
            "load": (load0, os.getloadavg()[0])}


def main(argv=None) -> int:
    from lab.core.errors import ConfigError
    from lab.models.embedders import load_embedder
    from lab.testset.gates import TOPIC_MODEL

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default=str(Path(__file__).resolve().parents[1] / "data" / "ord-qa"))
    ap.add_argument("--candidates", type=int, default=24, help="candidates per run (default 24)")
    ap.add_argument("--models", default="local", help="comma-separated --llm specs (default: local, the packaged "
                                                      "SmolLM2-135M)")
    ap.add_argument("--concurrency", default="1,8", help="comma-separated slot counts (default 1,8)")
    ap.add_argument("--threads", type=int, default=None,
                    help="llama.cpp threads (default: lab.models.llm.default_threads, the cores not busy)")
    ap.add_argument("--retry-on", default="text_gates", help="comma-separated retry_on values to compare "
                                                          "(parse, text_gates; default text_gates)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--retries", type=int, default=1, help="new generations per candidate (default 1)")
    ap.add_argument("--smoke", action="store_true", help="2 candidates, 1 and 2 slots, the default model (CI)")
    args = ap.parse_args(argv)
    if args.smoke:
        args.candidates, args.concurrency, args.models = 2, "1,2", "local"
    rows = []
    with tempfile.TemporaryDirectory(prefix="testset-bench-") as tmp:
        embedder = load_embedder(TOPIC_MODEL, cache_dir=Path(tmp) / "emb", progress=False)
        # one untimed candidate first: imports, tokenizer and stop words, corpus loading are then warm for every run
        run_one(args.dataset, "local", 1, args.threads, 1, args.seed, Path(tmp) / "warm-up", embedder)
        for model in [m.strip() for m in args.models.split(",") if m.strip()]:
            for slots, retry_on in [(s, r.strip()) for s in _ints(args.concurrency)
                                    for r in args.retry_on.split(",") if r.strip()]:
                try:
                    row = run_one(args.dataset, model, slots, args.threads, args.candidates, args.seed,
                                  Path(tmp) / model.replace("/", "_"), embedder, retry_on, args.retries)
                except ConfigError as e:  # an opt-in model that is not installed
                    print(f"{model}: skipped ({e})")
                    break
                rows.append(row)
                print(f"{row['model']} slots {row['slots']} threads {row['threads']} retry on {row['retry_on']}: "
                      f"{row['candidates']} candidates, {row['accepted']} "
                      f"accepted (yield {row['yield']:.1%}), {row['wall']:.1f} s, {row['per_min']:.2f} candidates/min, "
                      f"{row['accepted_per_min']:.2f} accepted/min, {row['tok_s']:.1f} generated tokens/s, "
                      f"{row['calls']} LLM calls, {row['errors']} backend errors, {row['gate_retries']} retries "
                      f"for a failed text gate (load {row['load'][0]:.2f} -> {row['load'][1]:.2f})",
                      flush=True)
    for model in dict.fromkeys(r["model"] for r in rows):
        mine = [r for r in rows if r["model"] == model]
        accepted, cands, wall = (sum(r[k] for r in mine) for k in ("accepted", "candidates", "wall"))
        speed = ", ".join(f"{r['slots']} slots {mine[0]['wall'] / r['wall']:.2f}x" for r in mine[1:])
        print(f"{model}: yield {accepted / max(cands, 1):.1%} ({accepted} of {cands}), "
              f"{accepted / wall * 60:.2f} accepted questions/min over all its runs"
              + (f"; speed-up over {mine[0]['slots']} slot(s): {speed}" if speed else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
