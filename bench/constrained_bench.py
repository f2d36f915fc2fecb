#!/usr/bin/env python3
"""Constrained decoding against free decoding on the same sampling path (docs/benchmarks.md).

For each of the schemas below (80, all distinct: nested objects, arrays, enums, anyOf, string formats,
patterns and lengths) a chat request asks for that JSON with response_format json_schema; its
free twin asks the same with no format, ignore_eos and max_tokens equal to the constrained
reply's tokens, so both decode the same number of tokens through the same sampler (T = 0.7,
a seed). TPOT = (end - first token) / (tokens - 1) from the stream's arrival times.
  batch 1:  each schema's pair in turn, constrained then free (interleaved);
  batch 32: rounds of 32 concurrent constrained requests, then their 32 free twins, repeated.
Reports median TPOT ratios (constrained / free) and checks every reply that ended against its
schema (jsonschema, with the formats checked).

    bench/constrained_bench.py [--model GGUF] [--rounds 3] [--out result.json]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import jsonschema
import requests

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


EXTRAS = [  # one more property per variant, so that the schemas of a template all differ
    ("mood", {"enum": ["happy", "calm", "busy"]}),
    ("score", {"type": "integer"}),
    ("keywords", {"type": "array", "items": {"type": "string", "maxLength": 16}, "maxItems": 3}),
    ("source", {"type": "object", "properties": {"name": {"type": "string"}, "year": {"type": "integer"}},
                "required": ["name", "year"], "additionalProperties": False}),
    ("verified", {"type": "boolean"}),
]


def vary(schema: dict, i: int) -> dict:
    name, extra = EXTRAS[i % len(EXTRAS)]
    return {**schema, "properties": {**schema["properties"], name: extra}, "required": schema["required"] + [name]}


def schemas() -> list[tuple[str, dict]]:
    """80 (question, schema) pairs, all schemas distinct: 16 templates, each in 5 variants."""
    out = []
    for i, (question, schema) in enumerate(templates()):
        out.append((question, vary(schema, i % 5)))  # a template recurs every 4th entry: 5 variants
    return out


def templates() -> list[tuple[str, dict]]:
    s = lambda props, req=None: {"type": "object", "properties": props, "required": req or list(props),
                                 "additionalProperties": False}
    string, integer, number, boolean = ({"type": t} for t in ("string", "integer", "number", "boolean"))
    out = []
    people = ["a cat named Tom", "a teacher named Ana", "a pilot called Li Wei", "a chef named Marco", "a child called Mia"]
    for i, who in enumerate(people):
        out.append((f"Describe {who} as JSON.", s({"name": string, "age": integer})))
        out.append((f"Describe {who} with a short bio.", s({"name": {"type": "string", "maxLength": 24},
                                                             "bio": {"type": "string", "minLength": 5, "maxLength": 80}})))
        out.append((f"Give {who}'s contact details.", s({"email": {"type": "string", "format": "email"},
                                                         "phone": {"type": "string", "pattern": "^\\+?[0-9 -]{7,15}$"}})))
        out.append((f"Give {who}'s birthday and whether they like tea.",
                    s({"born": {"type": "string", "format": "date"}, "likes_tea": boolean})))
    cities = ["Paris", "Tokyo", "Nairobi", "Lima", "Oslo"]
    for city in cities:
        out.append((f"Give facts about {city}.", s({"city": string, "country": string, "population": integer,
                                                   "capital": boolean})))
        out.append((f"Give the weather in {city}.", s({"city": string, "sky": {"enum": ["sunny", "cloudy", "rain", "snow"]},
                                                      "celsius": number})))
        out.append((f"List three sights in {city}.", s({"sights": {"type": "array", "items": string, "minItems": 3,
                                                                   "maxItems": 3}})))
        out.append((f"Plan a day in {city}.", s({"city": string, "stops": {"type": "array", "maxItems": 4, "items": s(
            {"place": string, "hour": {"type": "integer"}})}})))
    things = ["a book", "a film", "a song", "a board game", "a bicycle"]
    for thing in things:
        out.append((f"Describe {thing} with its maker.", s({"title": string, "maker": s({"name": string, "country": string}),
                                                           "year": integer})))
        out.append((f"Rate {thing}.", s({"item": string, "stars": {"enum": ["1", "2", "3", "4", "5"]},
                                        "review": {"type": "string", "maxLength": 60}})))
        out.append((f"Give an id and a timestamp for an order of {thing}.",
                    s({"id": {"type": "string", "format": "uuid"}, "at": {"type": "string", "format": "date-time"},
                       "quantity": integer})))
        out.append((f"Say where to buy {thing}: a shop or a website.", s({"where": {"anyOf": [
            s({"shop": string, "street": string}), s({"url": {"type": "string", "format": "uri"}})]}})))
    for topic in ["networking", "cooking", "gardening", "chess", "music"]:
        out.append((f"Give a quiz question about {topic}.", s({"question": string, "choices": {
            "type": "array", "items": string, "minItems": 2, "maxItems": 4}, "answer": integer})))
        out.append((f"Give a server's address for a {topic} club.", s({"host": {"type": "string", "format": "ipv4"},
                                                                       "port": integer, "open": boolean})))
        out.append((f"Give a to-do list for {topic}.", s({"todo": {"type": "array", "maxItems": 3, "items": s(
            {"task": {"type": "string", "maxLength": 40}, "done": boolean, "priority": {"enum": ["low", "high"]}})}})))
        out.append((f"Give a tag for {topic}: a code or a number.", s({"tag": {"anyOf": [
            {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{2}$"}, {"type": "integer"}]}, "note": {"anyOf": [string, {"type": "null"}]}})))
    return out


def format_checker() -> jsonschema.FormatChecker:
    checker = jsonschema.FormatChecker()

    @checker.checks("date-time", raises=ValueError)
    def date_time(value):
        return not isinstance(value, str) or bool(datetime.datetime.fromisoformat(value.replace("Z", "+00:00")))

    @checker.checks("uri", raises=ValueError)
    def uri(value):
        return not isinstance(value, str) or re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]*:\S+", value) is not None

    return checker


def stream_chat(url: str, body: dict) -> dict:
    """One streamed chat completion: its text, token count, finish reason and TPOT."""
    start = time.perf_counter()
    first = None
    text = ""
    finish = None
    usage = None
    with requests.post(url + "/v1/chat/completions", json={**body, "stream": True,
                                                           "stream_options": {"include_usage": True}},
                       stream=True, timeout=600) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith(b"data: ") or line == b"data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                usage = chunk["usage"]
            for choice in chunk.get("choices", []):
                piece = choice.get("delta", {}).get("content")
                if piece:
                    first = first or time.perf_counter()
                    text += piece
                finish = choice.get("finish_reason") or finish
    end = time.perf_counter()
    tokens = usage["completion_tokens"] if usage else 0
    tpot = (end - first) / (tokens - 1) if first and tokens > 1 else None
    return {"text": text, "tokens": tokens, "finish": finish, "tpot": tpot, "ttft": (first or end) - start}


def request(question: str, schema: dict | None, seed: int, max_tokens: int, ignore_eos: bool = False) -> dict:
    body = {"messages": [{"role": "system", "content": "You answer in JSON."}, {"role": "user", "content": question}],
            "temperature": 0.7, "seed": seed, "max_tokens": max_tokens}
    if schema is not None:
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema, "strict": True}}
    if ignore_eos:
        body["ignore_eos"] = True
    return body


def check(reply: dict, schema: dict, checker) -> str:
    """"valid", "cut" (ended by max_tokens: a prefix), or why it is invalid."""
    if reply["finish"] != "stop":
        return "cut"
    try:
        jsonschema.validate(json.loads(reply["text"]), schema, format_checker=checker)
        return "valid"
    except (json.JSONDecodeError, jsonschema.ValidationError) as e:
        return f"INVALID: {str(e).splitlines()[0]}: {reply['text'][:200]!r}"


def batch1(url: str, cases, max_tokens: int, checker) -> tuple[list[float], list[str]]:
    ratios, verdicts = [], []
    for i, (question, schema) in enumerate(cases):
        constrained = stream_chat(url, request(question, schema, i, max_tokens))
        verdicts.append(check(constrained, schema, checker))
        if constrained["tokens"] < 8:
            continue  # too short to time
        free = stream_chat(url, request(question, None, i, constrained["tokens"], ignore_eos=True))
        if constrained["tpot"] and free["tpot"]:
            ratios.append(constrained["tpot"] / free["tpot"])
    return ratios, verdicts


def concurrent_round(url: str, bodies: list[dict]) -> list[dict]:
    with concurrent.futures.ThreadPoolExecutor(len(bodies)) as pool:
        return list(pool.map(lambda b: stream_chat(url, b), bodies))


def batch32(url: str, cases, max_tokens: int, rounds: int, checker) -> tuple[list[float], list[str]]:
    ratios, verdicts = [], []
    for r in range(rounds):
        chosen = [cases[(r * 32 + k) % len(cases)] for k in range(32)]
        constrained = concurrent_round(url, [request(q, s, 1000 * r + k, max_tokens) for k, (q, s) in enumerate(chosen)])
        verdicts += [check(reply, s, checker) for reply, (_, s) in zip(constrained, chosen)]
        free = concurrent_round(url, [request(q, None, 1000 * r + k, max(2, c["tokens"]), ignore_eos=True)
                                      for k, ((q, _), c) in enumerate(zip(chosen, constrained))])
        c_tpot = statistics.median(c["tpot"] for c in constrained if c["tpot"])
        f_tpot = statistics.median(f["tpot"] for f in free if f["tpot"])
        ratios.append(c_tpot / f_tpot)
    return ratios, verdicts


def start_server(model: str) -> tuple[subprocess.Popen, str]:
    binary = os.environ.get("MNEMO_BIN", os.path.join(ROOT, "build/release/bin/mnemo"))
    state = tempfile.mkdtemp(prefix="mnemo-constrained-bench-")
    proc = subprocess.Popen([binary, "serve", "--port", "0", "--model", model, "--state-dir", state,
                             "--max-running", "32", "--access-log", "off"], stdout=subprocess.PIPE, text=True)
    for line in proc.stdout:
        m = re.search(r"at (http://[^/]+)/", line)
        if m:
            return proc, m.group(1)
    raise RuntimeError("mnemo serve did not start")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=os.path.expanduser("~/.cache/mnemo/models/gemma-3-270m-q4_k_m.gguf"))
    parser.add_argument("--url", help="a running server instead of starting one")
    parser.add_argument("--max-tokens", type=int, default=160)
    parser.add_argument("--rounds", type=int, default=3, help="batch-32 rounds")
    parser.add_argument("--out", help="write the result as JSON here")
    args = parser.parse_args()
    cases = schemas()
    proc = None
    url = args.url
    if url is None:
        proc, url = start_server(args.model)
    try:
        checker = format_checker()
        stream_chat(url, request(cases[0][0], cases[0][1], 0, 16))  # warm up
        r1, v1 = batch1(url, cases, args.max_tokens, checker)
        r32, v32 = batch32(url, cases, args.max_tokens, args.rounds, checker)
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=60)
    verdicts = v1 + v32
    invalid = [v for v in verdicts if v.startswith("INVALID")]
    result = {
        "model": os.path.basename(args.model), "schemas": len(cases),
        "batch1": {"pairs": len(r1), "median_tpot_ratio": statistics.median(r1), "ratios": r1},
        "batch32": {"rounds": len(r32), "median_tpot_ratio": statistics.median(r32), "ratios": r32},
        "replies": len(verdicts), "valid": verdicts.count("valid"), "cut_by_max_tokens": verdicts.count("cut"),
        "invalid": invalid,
    }
    print(json.dumps({k: v for k, v in result.items() if k not in ("ratios",)}, indent=1))
    print(f"batch 1: constrained/free TPOT median {result['batch1']['median_tpot_ratio']:.3f} over {len(r1)} pairs; "
          f"batch 32: {result['batch32']['median_tpot_ratio']:.3f} over {len(r32)} rounds; "
          f"{result['valid']} of {len(verdicts)} replies ended and validated, {result['cut_by_max_tokens']} cut by max_tokens, "
          f"{len(invalid)} invalid")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    return 1 if invalid else 0


if __name__ == "__main__":
    sys.exit(main())
