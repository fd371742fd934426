"""Tokens per second of the offline LLM (SmolLM2-135M Q4_1): in-process threads 1 vs 2, and through llama.cpp's HTTP
server (the OpenAI-compatible backend) against in-process, plus the cost of a cached rerun.

Workload: HyDE-style drafts for the first ``--n`` SciFact queries ("Write a short scientific passage that answers
the question: ..."), ``--max-tokens`` each, temperature 0, no cache (except for the rerun row). In-process and
HTTP run in the same process, alternately over ``--rounds`` (order flips each round) so a load change on a shared
machine hits both; the 2-thread peer runs apart, after them (llama.cpp's spinning threads slow whatever runs beside
them). The best round of each is reported. Generation tok/s = completion tokens / wall seconds of the calls
(prompt evaluation included, as a caller sees it).

    .venv/bin/python benchmarks/llm_speed.py [--n 5] [--max-tokens 64] [--rounds 2] [--skip-threads2] [--smoke]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("LAB_NO_PROGRESS", "1")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from lab.models.llm import LocalLLM, OpenAILLM  # noqa: E402
from lab.models.llm.local import smollm2_path  # noqa: E402

PROMPT = "Write a short scientific passage that answers the question: {q}"


def scifact_prompts(n: int) -> list[str]:
    with open(REPO / "data" / "scifact" / "queries.jsonl", encoding="utf-8") as f:
        queries = [json.loads(line)["text"] for line, _ in zip(f, range(n), strict=False)]
    return [PROMPT.format(q=q) for q in queries]


def run(llm, prompts: list[str], max_tokens: int) -> tuple[float, int, int]:
    """(wall seconds, prompt tokens, completion tokens) of answering ``prompts`` one after another."""
    t0 = time.perf_counter()
    out = [llm.complete(p, max_tokens=max_tokens) for p in prompts]
    return time.perf_counter() - t0, sum(c.prompt_tokens for c in out), sum(c.completion_tokens for c in out)


def compare(peers: dict, prompts: list[str], max_tokens: int, rounds: int) -> dict[str, tuple[float, int, int]]:
    """Best (lowest-seconds) result of each peer over ``rounds`` alternating rounds, after one warm-up call each."""
    for llm in peers.values():
        llm.complete("Hello", max_tokens=2)
    best: dict[str, tuple[float, int, int]] = {}
    for r in range(rounds):
        for name in (list(peers) if r % 2 == 0 else list(peers)[::-1]):
            res = run(peers[name], prompts, max_tokens)
            if name not in best or res[0] < best[name][0]:
                best[name] = res
    return best


def http_server(threads: int):
    import xllamacpp as xlc

    p = xlc.CommonParams()
    p.model.path = str(smollm2_path())
    p.n_ctx, p.n_parallel = 2048, 1
    p.cpuparams.n_threads = p.cpuparams_batch.n_threads = threads
    p.verbosity = -1
    server = xlc.Server(p)
    return server, server.listening_address.rstrip("/") + "/v1"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=5)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--skip-threads2", action="store_true", help="leave out the (slow on a busy machine) 2-thread peer")
    ap.add_argument("--smoke", action="store_true", help="1 prompt, 4 tokens, 1 round, no 2-thread peer (CI)")
    args = ap.parse_args(argv)
    if args.smoke:
        args.n, args.max_tokens, args.rounds, args.skip_threads2 = 1, 4, 1, True
    prompts = scifact_prompts(args.n)
    server, url = http_server(threads=1)
    # part 1: the same engine in-process and behind its HTTP server; alternating rounds, best of each
    peers = {
        "in-process, 1 thread": LocalLLM(threads=1, cache_dir=None, progress=False),
        "llama.cpp HTTP server, 1 thread": OpenAILLM("smollm2", url, cache_dir=None, progress=False),
    }
    best = compare(peers, prompts, args.max_tokens, args.rounds)
    # part 2, apart: a 2-thread engine's spinning threads would slow whatever runs next to it
    if not args.skip_threads2:
        two = LocalLLM(threads=2, cache_dir=None, progress=False)
        best.update(compare({"in-process, 2 threads": two}, prompts, args.max_tokens, args.rounds))
        two.close()
    with tempfile.TemporaryDirectory() as d:
        cached = LocalLLM(threads=1, cache_dir=d, progress=False)
        first = run(cached, prompts, args.max_tokens)
        rerun = run(LocalLLM(threads=1, cache_dir=d, progress=False), prompts, args.max_tokens)

    print(f"SmolLM2-135M-Instruct Q4_1, {len(prompts)} SciFact HyDE prompts, max_tokens={args.max_tokens}, "
          f"best of {args.rounds} rounds, load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    ref = best["in-process, 1 thread"]
    ref_tps = ref[2] / ref[0]
    print(f"{'peer':34s} {'seconds':>8s} {'prompt tok':>10s} {'gen tok':>8s} {'gen tok/s':>9s} {'vs 1 thread':>11s}")
    for name, (s, pt, ct) in best.items():
        print(f"{name:34s} {s:8.2f} {pt:10d} {ct:8d} {ct / s:9.1f} {ct / s / ref_tps:10.2f}x")
    print(f"{'cache: first run / rerun':34s} {first[0]:8.2f} / {rerun[0]:.4f} s  "
          f"(first run includes the model load; the rerun never loads it)")
    del server
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
