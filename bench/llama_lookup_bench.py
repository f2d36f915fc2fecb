#!/usr/bin/env python3
"""llama.cpp's n-gram speculative decoding on the prompts of bench/speculation_bench.py, as the
peer of Mnemo's figures there (docs/performance.md, "Speculative decoding").

Two llama-servers on the same GGUF and threads (--poll 0: a spinning thread takes the core its
sibling needs on 2 cores), one plain and one with `--spec-type TYPE` (default ngram-simple:
prompt lookup, the n-gram ending the context matched earlier in it), one slot each, prompt cache
off. Each pair sends the same request to both, one after the other (order alternating), and
compares llama-server's own decode rate (timings.predicted_per_second: the prompt excluded);
the figure is the median of the pairs' ratios, with the drafted and kept tokens it reports.
  code:  the code-editing prompts (/completion, T = 0, 160 tokens as Mnemo's bench);
  chat:  ShareGPT first turns (/v1/chat/completions, T = 0).

    bench/llama_lookup_bench.py [--model GGUF] [--pairs 5] [--spec-type ngram-simple] [--out result.json]
(build llama.cpp first: bench/build_llama_cpp.sh)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

import requests

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from speculation_bench import CODE_MAX_TOKENS, FUNCTIONS, code_prompt, conversations, wait_healthy  # noqa: E402


class LlamaServer:
    def __init__(self, binary: str, model: str, port: int, threads: int, extra: list[str]):
        self.url = f"http://127.0.0.1:{port}"
        self.proc = subprocess.Popen([binary, "-m", model, "--host", "127.0.0.1", "--port", str(port), "-t", str(threads),
                                      "-tb", str(threads), "--poll", "0", "-np", "1", "-c", "4096", "--no-webui",
                                      "--chat-template", "gemma", *extra],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_healthy(self.url, self.proc, f"llama-server {extra}")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)


def send(server: LlamaServer, kind: str, text: str, max_tokens: int) -> dict:
    if kind == "code":
        r = requests.post(server.url + "/completion", json={"prompt": text, "n_predict": max_tokens, "temperature": 0,
                                                            "cache_prompt": False}, timeout=600)
        r.raise_for_status()
        body = r.json()
        content = body["content"]
    else:
        r = requests.post(server.url + "/v1/chat/completions", json={"messages": [{"role": "user", "content": text}],
                                                                     "max_tokens": max_tokens, "temperature": 0,
                                                                     "cache_prompt": False}, timeout=600)
        r.raise_for_status()
        body = r.json()
        content = body["choices"][0]["message"]["content"]
    timings = body.get("timings", {})
    return {"text": content, "rate": timings.get("predicted_per_second"), "tokens": timings.get("predicted_n"),
            "drafted": timings.get("draft_n", 0), "kept": timings.get("draft_n_accepted", 0)}


def run(plain: LlamaServer, spec: LlamaServer, kind: str, texts: list[str], max_tokens: int) -> dict:
    ratios, drafted, kept, rates_with, rates_without, same = [], 0, 0, [], [], 0
    for i, text in enumerate(texts):
        order = [(plain, False), (spec, True)] if i % 2 == 0 else [(spec, True), (plain, False)]
        got = {}
        for server, with_spec in order:
            got[with_spec] = send(server, kind, text, max_tokens)
        ratios.append(got[True]["rate"] / got[False]["rate"])
        rates_with.append(got[True]["rate"])
        rates_without.append(got[False]["rate"])
        drafted += got[True]["drafted"] or 0
        kept += got[True]["kept"] or 0
        same += got[True]["text"] == got[False]["text"]
    s = {"workload": kind, "pairs": len(texts), "ratio_median": statistics.median(ratios), "ratios": ratios,
         "rate_without_median": statistics.median(rates_without), "rate_with_median": statistics.median(rates_with),
         "drafted": drafted, "acceptance": kept / drafted if drafted else 0.0, "identical_outputs": same}
    print(f"llama.cpp {kind:5s} {s['ratio_median']:.3f}x  (pairs: {' '.join(f'{r:.2f}' for r in ratios)}); "
          f"{s['rate_without_median']:.1f} -> {s['rate_with_median']:.1f} tokens/s; "
          f"{100 * s['acceptance']:.0f}% of {drafted} drafted kept; {same}/{len(texts)} outputs identical", flush=True)
    return s


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--llama-server", default=os.path.expanduser("~/.cache/mnemo/llama.cpp/build/bin/llama-server"))
    p.add_argument("--model", default=os.path.expanduser("~/.cache/mnemo/models/gemma-3-270m-q4_k_m.gguf"))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--pairs", type=int, default=5)
    p.add_argument("--max-tokens", type=int, default=96)
    p.add_argument("--spec-type", default="ngram-simple")
    p.add_argument("--out")
    args = p.parse_args()
    plain = LlamaServer(args.llama_server, args.model, 8395, args.threads, [])
    spec = LlamaServer(args.llama_server, args.model, 8396, args.threads, ["--spec-type", args.spec_type])
    try:
        code = [code_prompt(*FUNCTIONS[i % len(FUNCTIONS)]) for i in range(args.pairs)]
        chat = [c[0] for c in conversations(args.pairs, 1)]
        results = [run(plain, spec, "code", code, CODE_MAX_TOKENS), run(plain, spec, "chat", chat, args.max_tokens)]
    finally:
        plain.stop()
        spec.stop()
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump({"spec_type": args.spec_type, "results": results}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
