#!/usr/bin/env python3
"""Pipeline parallelism on loopback: throughput and latency of 1, 2 and 4 shards (docs/benchmarks.md).

For each shard count S, starts S `mnemo worker` processes (one kernel thread each) and a
coordinator (`mnemo serve --pipeline-stage ...`, one thread), and, as the peer in the same run,
one plain `mnemo serve` with one thread. Each configuration gets the same workload, in rounds
that alternate between the configurations: a batch of concurrent greedy chat requests (distinct
prompts, speculation off, so every configuration runs the same passes) and one request alone.
Reports per configuration the median over rounds of the batch's output tokens per second, and
of the lone request's time to first token and time per output token; each as a ratio to the
plain instance too. Also prints each configuration's outputs' agreement with the plain
instance (they must be equal: greedy and batch invariant).

On one 2-core machine S + 1 single-threaded processes oversubscribe the cores from S = 2 on:
these figures check the cost model in docs/benchmarks.md, they do not show speed-ups.

    bench/pipeline_bench.py [--model GGUF] [--rounds 5] [--batch 8] [--max-tokens 64]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import re
import statistics
import subprocess
import sys
import time

import requests

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from speculation_bench import wait_healthy  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LISTENING = re.compile(r"listening at (\S+) for a coordinator")
TOPICS = ["lighthouses", "bees", "volcanoes", "libraries", "glaciers", "trains", "coral reefs", "clocks", "deserts",
          "bridges", "owls", "tea", "comets", "markets", "rivers", "kites"]


def start_worker(binary: str, model: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([binary, "worker", "--model", model, "--port", "0", "-t", "1"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        m = LISTENING.search(line)
        if m:
            return proc, m.group(1)
    raise RuntimeError("mnemo worker did not start")


class Config:
    def __init__(self, binary: str, model: str, shards: int, port: int):
        self.name = f"{shards} shard" + ("s" if shards != 1 else "") if shards else "plain"
        self.workers = [start_worker(binary, model) for _ in range(shards)]
        stages = [arg for _, endpoint in self.workers for arg in ("--pipeline-stage", endpoint)]
        self.url = f"http://127.0.0.1:{port}"
        self.proc = subprocess.Popen([binary, "serve", "--model", model, "--port", str(port), "-t", "1",
                                      "--access-log", "off", "--speculation", "off", *stages],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        wait_healthy(self.url, self.proc, self.name)
        self.batch_rates: list[float] = []
        self.ttft: list[float] = []
        self.tpot: list[float] = []
        self.outputs: dict[str, str] = {}

    def stop(self):
        for p in [self.proc] + [w for w, _ in self.workers]:
            p.terminate()
        for p in [self.proc] + [w for w, _ in self.workers]:
            p.wait(timeout=60)


def request(url: str, prompt: str, max_tokens: int) -> dict:
    body = {"messages": [{"role": "user", "content": prompt}], "temperature": 0, "max_tokens": max_tokens,
            "stream": True, "stream_options": {"include_usage": True}}
    started = time.perf_counter()
    times, text, tokens = [], [], 0
    with requests.post(url + "/v1/chat/completions", json=body, stream=True, timeout=900) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            raw = line.decode("utf-8")
            if not raw.startswith("data: ") or raw == "data: [DONE]":
                continue
            event = json.loads(raw[6:])
            for choice in event.get("choices", []):
                if choice.get("delta", {}).get("content"):
                    times.append(time.perf_counter())
                    text.append(choice["delta"]["content"])
            if event.get("usage"):
                tokens = event["usage"]["completion_tokens"]
    ttft = times[0] - started if times else float("nan")
    tpot = (times[-1] - times[0]) / (tokens - 1) if tokens > 1 and len(times) > 1 else float("nan")
    return {"text": "".join(text), "tokens": tokens, "ttft": ttft, "tpot": tpot}


def run_round(config: Config, round_index: int, batch: int, max_tokens: int) -> None:
    prompts = [f"Write a short paragraph about {TOPICS[(round_index * batch + i) % len(TOPICS)]}." for i in range(batch)]
    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(batch) as pool:
        results = list(pool.map(lambda p: request(config.url, p, max_tokens), prompts))
    config.batch_rates.append(sum(r["tokens"] for r in results) / (time.perf_counter() - started))
    for p, r in zip(prompts, results):
        config.outputs[p] = r["text"]
    alone = request(config.url, f"Describe {TOPICS[round_index % len(TOPICS)]} in two sentences. ({round_index})", max_tokens)
    config.ttft.append(alone["ttft"])
    config.tpot.append(alone["tpot"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", default=os.path.join(ROOT, "build/release/bin/mnemo"))
    parser.add_argument("--model", default=os.path.expanduser("~/.cache/mnemo/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    parser.add_argument("--shards", default="1,2,4")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=64)
    args = parser.parse_args()
    counts = [0] + [int(s) for s in args.shards.split(",")]
    configs = [Config(args.binary, args.model, s, 47300 + i) for i, s in enumerate(counts)]
    try:
        for r in range(args.rounds):
            order = configs if r % 2 == 0 else list(reversed(configs))
            for c in order:
                run_round(c, r, args.batch, args.max_tokens)
    finally:
        for c in configs:
            c.stop()
    plain = configs[0]
    base = (statistics.median(plain.batch_rates), statistics.median(plain.ttft), statistics.median(plain.tpot))
    print(f"model {args.model}; batch {args.batch} x {args.max_tokens} tokens; {args.rounds} rounds; medians")
    print("| configuration | batch tok/s | vs plain | lone TTFT ms | vs plain | lone TPOT ms | vs plain | outputs = plain |")
    print("|---|---|---|---|---|---|---|---|")
    for c in configs:
        rate, ttft, tpot = statistics.median(c.batch_rates), statistics.median(c.ttft), statistics.median(c.tpot)
        same = sum(c.outputs[p] == plain.outputs.get(p) for p in c.outputs)
        print(f"| {c.name} | {rate:.1f} | {rate / base[0]:.3f} | {ttft * 1e3:.1f} | {ttft / base[1]:.3f} | "
              f"{tpot * 1e3:.2f} | {tpot / base[2]:.3f} | {same}/{len(c.outputs)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
