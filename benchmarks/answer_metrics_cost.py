"""Cost of the answer metrics with the offline LLM, and what the shared ``Context:`` prefix saves.

For one ord-qa query (BM25 top-5 contexts fitted to --context-tokens), with SmolLM2 and no response cache:
1. the cost of each phase of one query (answer, support judgements for faithfulness + context recall,
   usefulness judgements for context precision, generated questions for answer relevancy): calls, prompt and
   completion tokens, seconds;
2. the prefix-reuse peer: the same support judgements, (a) right after the answer, as the pipeline runs them
   (llama.cpp keeps the evaluated context in its slot and evaluates only each statement), and (b) with a short
   unrelated prompt sent before each one (the slot's cache is replaced; xllamacpp's host-memory prompt cache
   may still restore the context), and (c) with the statement written before the context, so no two prompts
   share the context as a prefix and it is evaluated every time. Printed: seconds of each and the ratios.

Run: .venv/bin/python benchmarks/answer_metrics_cost.py [--query 1] [--context-tokens 512] [--claims 4]
Figures depend on the machine and its load; no assertion is made.
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--query", default="1")
    ap.add_argument("--context-tokens", type=int, default=512)
    ap.add_argument("--answer-tokens", type=int, default=96)
    ap.add_argument("--claims", type=int, default=4)
    ap.add_argument("--smoke", action="store_true",
                    help="top-2 contexts in 64 tokens, 8 answer tokens, 1 claim, 1 generated question (CI)")
    args = ap.parse_args()
    if args.smoke:
        args.context_tokens, args.answer_tokens, args.claims = 64, 8, 1
    n_contexts = 2 if args.smoke else 5

    from lab.analysis.answer_metrics import Judge, split_claims
    from lab.experiment.answers import (
        answer_prompt,
        build_samples,
        completion_cost,
        context_char_budget,
        format_context,
    )
    from lab.experiment.run import load
    from lab.models.embedders import load_embedder
    from lab.models.llm import load_llm
    from lab.retrievers.base import Context, build

    ds = load("data/ord-qa", progress=False)
    queries, _ = ds.split("test")
    queries = queries.subset([args.query])
    bm25 = build("bm25", {}, Context(cache_dir=Path(tempfile.mkdtemp(prefix="bench-answers-")), progress=False))
    bm25.index(ds.corpus)
    run = bm25.search(queries, n_contexts)
    llm = load_llm("local", cache_dir=None, progress=False)  # no response cache: every call is generated
    budget = context_char_budget(llm, args.answer_tokens, args.context_tokens)
    sample = build_samples(queries, run, ds.corpus, n_contexts, budget)[0]
    judge = Judge(llm, load_embedder("all-MiniLM-L6-v2", progress=False),
                  n_questions=1 if args.smoke else 3)
    context = format_context(sample.contexts)
    claims = split_claims(sample.reference)[:args.claims]
    llm.complete("Say hello.", max_tokens=2)  # load the model outside the timings

    def phase(name, fn):
        t0 = time.perf_counter()
        comps = fn()
        cost = completion_cost(comps)
        print(f"  {name:<34} {cost['calls']:>3} calls {cost['prompt_tokens']:>6} prompt + "
              f"{cost['completion_tokens']:>4} completion tokens {time.perf_counter() - t0:7.1f} s")
        return comps

    print(f"ord-qa query {args.query}: {len(sample.contexts)} contexts, {len(context)} characters; "
          f"{len(claims)} reference claims; {llm.identity}, 1 thread")
    answer = phase("answer", lambda: [llm.complete(answer_prompt(sample.question, sample.contexts),
                                                   max_tokens=args.answer_tokens)])[0].text
    t0 = time.perf_counter()
    phase("support (after the answer)", lambda: judge.support(context, claims).completions)
    shared = time.perf_counter() - t0
    phase("usefulness (one per chunk)",
          lambda: judge.useful(sample.question, sample.reference, sample.contexts).completions)
    phase("questions (answer relevancy)", lambda: judge.questions(answer or "I don't know.")[2])

    def evicted():
        out = []
        for claim in claims:
            llm.complete("Name a colour.", max_tokens=2)  # replaces the slot's cached prompt
            out += judge.support(context, [claim + " "]).completions  # a new statement (not the one just judged)
        return out

    t0 = time.perf_counter()
    phase("support (slot cache replaced)", evicted)
    replaced = time.perf_counter() - t0

    def statement_first():
        return [llm.complete(f"Statement: {c}\n\nContext:\n{context}\n\nIs the statement supported by the context? "
                             "Answer yes or no.", max_tokens=judge.verdict_tokens) for c in claims]

    t0 = time.perf_counter()
    phase("support (statement first, no prefix)", statement_first)
    unshared = time.perf_counter() - t0
    print(f"prefix reuse: support judgements {shared:.1f} s with the context as shared prefix; "
          f"{replaced:.1f} s with the slot cache replaced before each ({replaced / max(shared, 1e-9):.1f}x, "
          f"incl. {len(claims)} 2-token calls); {unshared:.1f} s with no shared prefix "
          f"({unshared / max(shared, 1e-9):.1f}x)")


if __name__ == "__main__":
    main()
