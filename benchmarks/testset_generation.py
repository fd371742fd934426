"""Throughput of question generation with the packaged SmolLM2-135M: one llama.cpp slot vs several slots decoded
in one batch (``lab testset generate --concurrency N``), on the same ord-qa prompts, cache off.

    .venv/bin/python benchmarks/testset_generation.py [--prompts 8] [--concurrency 4] [--smoke]

Prints seconds per candidate for each setting and their ratio (same process, same prompts, back to back). The
outputs may differ in the last digits of the logits between batch shapes, so a candidate's text can change; the
gate report of a real run is what to compare for quality.
"""
from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main(argv=None) -> int:
    from lab.data.beir import load_dataset
    from lab.models.llm import LocalLLM
    from lab.testset.generate import GenerationConfig, _gen_params, _safe_map, build_prompt, sample_order

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--dataset", default=str(Path(__file__).resolve().parents[1] / "data" / "ord-qa"))
    ap.add_argument("--smoke", action="store_true", help="2 prompts, 2 slots: checks that it runs (CI)")
    args = ap.parse_args(argv)
    if args.smoke:
        args.prompts, args.concurrency = 2, 2
    ds = load_dataset(args.dataset, progress=False)
    cfg = GenerationConfig()
    order = sample_order(ds.corpus, cfg.seed, cfg.stratify, cfg.min_passage_words, cfg.max_passage_chars,
                         cfg.prose_only)[0]
    prompts = [build_prompt(p.text, "en", cfg.max_passage_chars) for p in order[:args.prompts]]
    gen = _gen_params(cfg, 0, 0, "en")
    rows = []
    for slots in (1, args.concurrency):
        llm = LocalLLM(None, cache_dir=None, concurrency=slots, progress=False)
        llm.complete("Hello", max_tokens=1)  # load the model outside the timing
        t0 = time.perf_counter()
        outs = _safe_map(llm, prompts, **gen)
        dt = time.perf_counter() - t0
        u = llm.usage()
        rows.append((slots, dt / len(prompts), u["completion_tokens"] / dt, sum(e is not None for _, e in outs)))
        llm.close()
    for slots, per, tps, errors in rows:
        print(f"slots {slots}: {per:.2f} s per candidate, {tps:.1f} generated tokens/s, {errors} backend errors")
    print(f"speed-up of {args.concurrency} slots over 1: {rows[0][1] / rows[1][1]:.2f}x ({len(prompts)} prompts)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
