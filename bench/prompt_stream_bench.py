#!/usr/bin/env python3
"""Prompt KV streamed layer by layer (docs/benchmarks.md, "Prompt KV streaming"; SPEC D3).

A real etcd, a `--role prefill` and a `--role decode` instance on the default model and `mnemo
route` in front (disaggregated serving, SPEC D4). Each scenario starts a fresh cluster and sends
REQUESTS streamed chat requests one at a time, each a different long ShareGPT first turn (no
cache hits), forced to 2 output tokens:

  layers  the prefill instance sends the prompt's KV to the decode instance layer by layer while
          it computes the prompt (--stream-prompt-layers true, the default)
  whole   the same KV, whole chunks once the prompt's step has ended (--stream-prompt-layers false)

Reported: time to first token at the client (prefill, KV handoff, the decode instance's first
step, the router's relays), per scenario and as the ratio layers / whole of the same prompt in
the same repeat, medians over prompts and repeats; and the prefill instance's layer messages.

  .venv/bin/python bench/prompt_stream_bench.py [--out bench/results/prompt-stream-DATE] [--repeats 3]

Not part of CI (minutes). Needs a release build and etcd (scripts/setup.sh).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import requests

from failover_bench import ROOT, Proc, etcd_server, first_turns, metric, wait, write_results

# Every figure is measured on Gemma 3 270M (`mnemo serve` defaults to the chat model).
GEMMA_MODEL = os.path.join(os.environ.get("MNEMO_CACHE") or os.path.expanduser("~/.cache/mnemo"), "models", "gemma-3-270m-q4_k_m.gguf")

SCENARIOS = {"layers": "true", "whole": "false"}


def first_token_seconds(url: str, body: dict) -> float:
    started = time.monotonic()
    with requests.post(url + "/v1/chat/completions", json={**body, "stream": True}, stream=True, timeout=600) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith(b"data: ") or line == b"data: [DONE]":
                continue
            # The opening chunk carries the role and empty content: the first text is what counts.
            if any(c.get("delta", {}).get("content") for c in json.loads(line[6:]).get("choices", [])):
                return time.monotonic() - started
    raise RuntimeError("the stream ended without a token")


def run_scenario(args, scenario: str, bodies: list[dict], etcd_url: str, workdir: Path) -> dict:
    name = f"ps{os.getpid()}{scenario}{int(time.time() * 1000) % 100000}"
    procs = []
    urls = {}
    for role in ("prefill", "decode"):
        log = workdir / f"{scenario}-{role}.log"
        p = Proc([args.mnemo_bin, "serve", "--model", GEMMA_MODEL, "--host", "127.0.0.1", "--port", "0", "--state-dir",
                  tempfile.mkdtemp(prefix="mnemo-psbench-", dir=workdir), "--cluster", etcd_url, "--cluster-name", name,
                  "--threads", str(args.threads), "--kv-tokens", str(args.kv_tokens), "--model-name", "m", "--role", role,
                  "--stream-prompt-layers", SCENARIOS[scenario]], log)
        urls[role] = p.url_from_log(log)
        procs.append(p)
    rlog = workdir / f"{scenario}-router.log"
    router = Proc([args.mnemo_bin, "route", "--cluster", etcd_url, "--cluster-name", name, "--port", "0"], rlog)
    router_url = router.url_from_log(rlog)
    wait(lambda: metric(router_url, "mnemo_router_instances", 0) == 1
         and metric(router_url, "mnemo_router_prefill_instances", 0) == 1, 30, "both instances in the router's view")
    try:
        for url in urls.values():  # warm each instance (pages of the model, threads)
            requests.post(url + "/v1/chat/completions", json={"messages": [{"role": "user", "content": "Hi"}],
                                                              "max_tokens": 2}, timeout=120)
        ttft = [first_token_seconds(router_url, b) for b in bodies]
        layer_messages = metric(urls["prefill"], "mnemo_kv_replica_layer_messages_total", 0)
    finally:
        router.stop()
        for p in procs:
            p.stop()
    return {"scenario": scenario, "ttft": ttft, "layer_messages": layer_messages}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mnemo-bin", default=str(ROOT / "build/release/bin/mnemo"))
    ap.add_argument("--out", default=str(ROOT / f"bench/results/prompt-stream-{time.strftime('%Y%m%d-%H%M%S')}"))
    ap.add_argument("--data", default=str(ROOT / "data/sharegpt_en.jsonl"))
    ap.add_argument("--threads", type=int, default=1, help="per instance")
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--min-chars", type=int, default=4000, help="of the first turns used as prompts")
    ap.add_argument("--max-chars", type=int, default=9000)
    ap.add_argument("--kv-tokens", type=int, default=32768)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    prompts = first_turns(Path(args.data), args.requests, args.min_chars, args.max_chars, args.seed)
    bodies = [{"model": "m", "messages": [{"role": "user", "content": p}], "max_tokens": 2, "ignore_eos": True,
               "temperature": 0} for p in prompts]
    results = []
    with etcd_server(out) as etcd_url:
        for repeat in range(args.repeats):
            # Alternate which scenario goes first, so that a drift in the machine's load does not
            # favour one.
            for scenario in (list(SCENARIOS) if repeat % 2 == 0 else list(reversed(SCENARIOS))):
                r = run_scenario(args, scenario, bodies, etcd_url, out)
                r["repeat"] = repeat
                results.append(r)
                print(f"repeat {repeat} {scenario:6s} TTFT median {statistics.median(r['ttft']):.3f} s, "
                      f"layer messages {r['layer_messages']:.0f}", flush=True)
    write_results(out, args, results, report(results))
    return 0


def report(results: list[dict]) -> str:
    by = {(r["repeat"], r["scenario"]): r for r in results}
    repeats = sorted({r["repeat"] for r in results})
    ratios = [a / b for rep in repeats for a, b in zip(by[(rep, "layers")]["ttft"], by[(rep, "whole")]["ttft"])]
    lines = ["| scenario | TTFT median (s) | TTFT per repeat (s) | layer messages per repeat |", "|---|---|---|---|"]
    for scenario in SCENARIOS:
        runs = [by[(rep, scenario)] for rep in repeats]
        lines.append(f"| {scenario} | {statistics.median(t for r in runs for t in r['ttft']):.3f} | "
                     + ", ".join(f"{statistics.median(r['ttft']):.3f}" for r in runs) + " | "
                     + ", ".join(f"{r['layer_messages']:.0f}" for r in runs) + " |")
    lines.append("")
    lines.append(f"TTFT layers / whole, same prompt and repeat: median {statistics.median(ratios):.3f} "
                 f"(p10 {sorted(ratios)[len(ratios) // 10]:.3f}, p90 {sorted(ratios)[len(ratios) * 9 // 10]:.3f}, "
                 f"{len(ratios)} pairs)")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
