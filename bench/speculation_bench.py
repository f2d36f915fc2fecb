#!/usr/bin/env python3
"""Speculative decoding against none, on one server (docs/performance.md: "Speculative decoding").

One `mnemo serve` runs with speculation on; every measurement pairs a request sent with
"speculation": false and the same request without it (the order alternating pair by pair), so
both sides meet the machine in the same state and the same process.
  code:    code-editing prompts (/v1/completions, T = 0): a function in the context, the model
           asked to write it again with one change;
  chat:    multi-turn ShareGPT conversations (data/sharegpt_en.jsonl) replayed through the
           Responses API, each turn chained to the server's own previous reply
           (previous_response_id), no ignore_eos, at T = 0 and at T = 0.7 (a seed);
  batch 32: rounds of 32 concurrent chat first turns, all with speculation then all without (or
           the other way round, alternating), T = 0.7.
Each side of each pair is its own tenant (cache_salt), so neither finds the other's KV or drafts
from the other's output. Batch 1 reports each request's decode rate, (tokens - 1) / (last token's arrival - first's), so
that the prefill (and a prefix found cached) does not count; batch 32 the round's output tokens
over its wall time. Each figure is the median of the pairs' ratios (with / without); the
acceptance rate and the tokens per forward come from the server's metrics over each side's
requests. Every pair's two outputs must be equal (they are the same tokens by construction).

    bench/speculation_bench.py [--model GGUF] [--pairs 5] [--out result.json]
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

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

FUNCTIONS = [
    ("moving_average", "window", "size", '''def moving_average(values, window):
    if window <= 0:
        raise ValueError("window must be positive")
    result = []
    total = 0.0
    for i, value in enumerate(values):
        total += value
        if i >= window:
            total -= values[i - window]
        if i >= window - 1:
            result.append(total / window)
    return result
'''),
    ("merge_intervals", "intervals", "spans", '''def merge_intervals(intervals):
    if not intervals:
        return []
    ordered = sorted(intervals, key=lambda pair: pair[0])
    merged = [list(ordered[0])]
    for start, end in ordered[1:]:
        last = merged[-1]
        if start <= last[1]:
            last[1] = max(last[1], end)
        else:
            merged.append([start, end])
    return [tuple(pair) for pair in merged]
'''),
    ("word_counts", "text", "document", '''def word_counts(text):
    counts = {}
    for line in text.splitlines():
        for word in line.split():
            word = word.strip(".,;:!?").lower()
            if not word:
                continue
            counts[word] = counts.get(word, 0) + 1
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))
'''),
    ("binary_search", "items", "values", '''def binary_search(items, target):
    low, high = 0, len(items) - 1
    while low <= high:
        middle = (low + high) // 2
        if items[middle] == target:
            return middle
        if items[middle] < target:
            low = middle + 1
        else:
            high = middle - 1
    return -1
'''),
    ("parse_config", "path", "filename", '''def parse_config(path):
    settings = {}
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if "=" not in line:
                raise ValueError(f"line {number}: expected key = value")
            key, value = line.split("=", 1)
            settings[key.strip()] = value.strip()
    return settings
'''),
]


def code_prompt(name: str, old: str, new: str, source: str) -> str:
    renamed_head = source.splitlines()[0].replace(old, new)
    return (f"Here is a Python function:\n\n{source}\nRewrite it with the parameter `{old}` renamed to `{new}`, "
            f"keeping everything else the same:\n\n{renamed_head}\n")


CODE_MAX_TOKENS = 160  # room for a whole rewritten function


def wait_healthy(url: str, proc: subprocess.Popen, what: str) -> None:
    """Until url/health answers 200; fails if the process exits or 300 s pass."""
    deadline = time.time() + 300
    while time.time() < deadline:
        try:
            if requests.get(url + "/health", timeout=2).status_code == 200:
                return
        except requests.RequestException:
            pass
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited" + (": " + proc.stderr.read() if proc.stderr else ""))
        time.sleep(0.5)
    raise RuntimeError(f"{what} did not become healthy")


class Server:
    def __init__(self, binary: str, model: str, port: int):
        self.url = f"http://127.0.0.1:{port}"
        self.proc = subprocess.Popen([binary, "serve", "--model", model, "--port", str(port), "--access-log", "off"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        wait_healthy(self.url, self.proc, "mnemo serve")

    def counters(self) -> dict[str, float]:
        text = requests.get(self.url + "/metrics", timeout=10).text
        out = {"tokens": 0.0, "passes": 0.0, "drafted": 0.0, "kept": 0.0}
        for line in text.splitlines():
            m = re.match(r"^(\S+?)(\{[^}]*\})?\s+(\S+)$", line)
            if not m:
                continue
            name, value = m.group(1), float(m.group(3))
            if name == "mnemo_generation_tokens_total":
                out["tokens"] += value
            elif name == "mnemo_decode_passes_total":
                out["passes"] += value
            elif name == "mnemo_spec_draft_tokens_total":
                out["drafted"] += value
            elif name == "mnemo_spec_accepted_tokens_total":
                out["kept"] += value
        return out

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)


def stream(url: str, path: str, body: dict) -> dict:
    """Sends a streamed request; returns text, token count, decode rate, response id."""
    times, text, tokens, response_id = [], [], None, None
    with requests.post(url + path, json={**body, "stream": True}, stream=True, timeout=600) as r:
        r.raise_for_status()
        # Lines split as bytes: str.splitlines would also break a JSON string at U+2028 and the like.
        for line in r.iter_lines():
            raw = line.decode("utf-8")
            if not raw or not raw.startswith("data: ") or raw == "data: [DONE]":
                continue
            event = json.loads(raw[6:])
            if path == "/v1/responses":
                kind = event.get("type")
                if kind == "response.output_text.delta":
                    times.append(time.perf_counter())
                    text.append(event["delta"])
                elif kind in ("response.completed", "response.incomplete"):
                    tokens = event["response"]["usage"]["output_tokens"]
                    response_id = event["response"]["id"]
            else:
                for choice in event.get("choices", []):
                    if choice.get("text"):
                        times.append(time.perf_counter())
                        text.append(choice["text"])
                if event.get("usage"):
                    tokens = event["usage"]["completion_tokens"]
    rate = (tokens - 1) / (times[-1] - times[0]) if tokens and len(times) > 1 and times[-1] > times[0] else None
    return {"text": "".join(text), "tokens": tokens, "rate": rate, "id": response_id}


def salt(pair: int, speculation: bool, *more) -> str:
    """A tenant of its own for each side of each pair: neither side finds the other's KV cached or
    drafts from the other's identical output (the tenant-history drafter)."""
    return "-".join(str(x) for x in ("bench", pair, speculation, *more))


def paired(server: Server, send, index: int) -> dict:
    """One pair: `send(speculation)` without and with, in alternating order; the counters of each."""
    result = {}
    for speculation in ([False, True] if index % 2 == 0 else [True, False]):
        before = server.counters()
        reply = send(speculation)
        after = server.counters()
        delta = {k: after[k] - before[k] for k in before}
        result["with" if speculation else "without"] = {**reply, **delta}
    if result["with"]["text"] != result["without"]["text"]:
        raise RuntimeError(f"outputs differ with speculation:\n{result['with']['text']!r}\n{result['without']['text']!r}")
    return result


def code_pairs(server: Server, pairs: int, max_tokens: int) -> list[dict]:
    out = []
    for i in range(pairs):
        name, old, new, source = FUNCTIONS[i % len(FUNCTIONS)]
        prompt = code_prompt(name, old, new, source)
        body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream_options": {"include_usage": True}}
        out.append(paired(server, lambda s: stream(server.url, "/v1/completions", {**body, "speculation": s,
                                                                                    "cache_salt": salt(i, s)}), i))
    return out


def conversations(count: int, turns: int) -> list[list[str]]:
    out = []
    with open(os.path.join(ROOT, "data", "sharegpt_en.jsonl"), encoding="utf-8") as f:
        for line in f:
            conv = json.loads(line)
            users = [m["value"][:1500] for m in conv["conversations"] if m["from"] == "human"]
            if len(users) >= turns:
                out.append(users[:turns])
            if len(out) == count:
                break
    return out


def chat_pairs(server: Server, pairs: int, turns: int, temperature: float, max_tokens: int) -> list[dict]:
    """Each pair replays one conversation twice (with and without), each replay its own chain."""
    out = []
    for i, users in enumerate(conversations(pairs, turns)):
        def replay(speculation: bool, users=users):
            previous, text, tokens, rates = None, [], 0, []
            for turn, message in enumerate(users):
                body = {"input": message, "max_output_tokens": max_tokens, "temperature": temperature, "seed": 7 + turn,
                        "speculation": speculation, "cache_salt": salt(i, speculation, temperature)}
                if previous:
                    body["previous_response_id"] = previous
                reply = stream(server.url, "/v1/responses", body)
                previous = reply["id"]
                text.append(reply["text"])
                tokens += reply["tokens"] or 0
                if reply["rate"]:
                    rates.append(reply["rate"])
            return {"text": "\x00".join(text), "tokens": tokens, "rate": statistics.median(rates) if rates else None}
        out.append(paired(server, replay, i))
    return out


def batch_rounds(server: Server, rounds: int, batch: int, max_tokens: int) -> list[dict]:
    firsts = [c[0] for c in conversations(batch, 1)]
    out = []
    for i in range(rounds):
        def round_of(speculation: bool):
            start = time.perf_counter()
            with concurrent.futures.ThreadPoolExecutor(batch) as pool:
                replies = list(pool.map(lambda m: stream(server.url, "/v1/responses", {
                    "input": m, "max_output_tokens": max_tokens, "temperature": 0.7, "seed": 3,
                    "speculation": speculation, "store": False, "cache_salt": salt(i, speculation)}), firsts))
            wall = time.perf_counter() - start
            tokens = sum(r["tokens"] or 0 for r in replies)
            return {"text": "\x00".join(r["text"] for r in replies), "tokens": tokens, "rate": tokens / wall}
        out.append(paired(server, round_of, i))
    return out


def summarize(name: str, pairs: list[dict]) -> dict:
    ratios = [p["with"]["rate"] / p["without"]["rate"] for p in pairs if p["with"]["rate"] and p["without"]["rate"]]
    drafted = sum(p["with"]["drafted"] for p in pairs)
    kept = sum(p["with"]["kept"] for p in pairs)
    tokens = sum(p["with"]["tokens"] for p in pairs)
    passes = sum(p["with"]["passes"] for p in pairs)
    s = {"workload": name, "pairs": len(pairs), "ratio_median": statistics.median(ratios) if ratios else None,
         "ratios": ratios, "rate_with_median": statistics.median(p["with"]["rate"] for p in pairs if p["with"]["rate"]),
         "rate_without_median": statistics.median(p["without"]["rate"] for p in pairs if p["without"]["rate"]),
         "acceptance": kept / drafted if drafted else 0.0, "drafted": drafted,
         "tokens_per_forward": tokens / passes if passes else None}
    print(f"{name:22s} {s['ratio_median']:.3f}x  (pairs: {' '.join(f'{r:.2f}' for r in ratios)}); "
          f"{s['rate_without_median']:.1f} -> {s['rate_with_median']:.1f} tokens/s; "
          f"{100 * s['acceptance']:.0f}% of {drafted:.0f} drafted kept; {s['tokens_per_forward'] or 0:.2f} tokens per pass",
          flush=True)
    return s


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mnemo", default=os.path.join(ROOT, "build", "release", "bin", "mnemo"))
    p.add_argument("--model", default=os.path.expanduser("~/.cache/mnemo/models/gemma-3-270m-q4_k_m.gguf"))
    p.add_argument("--port", type=int, default=8391)
    p.add_argument("--pairs", type=int, default=5)
    p.add_argument("--turns", type=int, default=3)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--only", choices=["code", "chat", "batch"], action="append")
    p.add_argument("--out")
    args = p.parse_args()
    server = Server(args.mnemo, args.model, args.port)
    results = []
    try:
        only = args.only or ["code", "chat", "batch"]
        if "code" in only:
            results.append(summarize("code, batch 1, T=0", code_pairs(server, args.pairs, CODE_MAX_TOKENS)))
        if "chat" in only:
            results.append(summarize("chat, batch 1, T=0", chat_pairs(server, args.pairs, args.turns, 0.0, args.max_tokens)))
            results.append(summarize("chat, batch 1, T=0.7", chat_pairs(server, args.pairs, args.turns, 0.7, args.max_tokens)))
        if "batch" in only:
            results.append(summarize(f"chat, batch {args.batch}, T=0.7", batch_rounds(server, args.pairs, args.batch, args.max_tokens)))
    finally:
        server.stop()
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump({"model": args.model, "results": results}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
