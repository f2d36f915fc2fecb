#!/usr/bin/env python3
"""Mnemo against llama.cpp on the same GGUF, in one interleaved run: each round runs `mnemo bench`
once, then llama-bench once, then llama-batched-bench once, so that both programs see the same
neighbours on a shared machine; the table gives each measure's median over the rounds and the
ratio of the medians (bench/compare_llama_cpp.sh calls it).

  compare_interleaved.py --model FILE [--threads 2] [--rounds 3] [--batches 1,8,32] [--prompt 512]
                         [--mnemo BIN] [--llama-bin DIR] [--json OUT]

--prompt 0 measures decode only (the quant-type comparisons: decode at batch 1 on each type).
"""
import argparse
import json
import re
import statistics
import subprocess
import sys


def run(cmd):
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.stderr.write(done.stdout + done.stderr)
        raise SystemExit(f"compare_interleaved: {cmd[0]} failed ({done.returncode})")
    return done.stdout


def mnemo_round(args, batches):
    cmd = [args.mnemo, "bench", "-m", args.model, "-t", str(args.threads), "-p", str(max(args.prompt, 1)),
           "-c", "128", "-n", "32", "-b", ",".join(map(str, batches)), "-r", "1"]
    out = run(cmd)
    result = {}
    if args.prompt > 0:
        m = re.search(r"^prefill\s+pp\d+\s+([\d.]+) tokens/s", out, re.M)
        result["prefill"] = float(m.group(1))
    for m in re.finditer(r"^decode\s+batch (\d+)\s+ctx \d+\s+([\d.]+) tokens/s", out, re.M):
        result[f"decode{m.group(1)}"] = float(m.group(2))
    m = re.search(r"= (\d+)% of the int8 peak", out)
    if m:
        result["peak_share"] = float(m.group(1))
    return result


def llama_round(args, batches):
    result = {}
    cmd = [f"{args.llama_bin}/llama-bench", "-m", args.model, "-t", str(args.threads), "-n", "32", "-r", "1", "-o", "json",
           "-p", str(args.prompt) if args.prompt > 0 else "0"]
    for entry in json.loads(run(cmd)):
        if entry["n_prompt"] > 0 and entry["n_gen"] == 0:
            result["prefill"] = float(entry["avg_ts"])
        elif entry["n_gen"] > 0 and entry["n_prompt"] == 0:
            result["decode1"] = float(entry["avg_ts"])
    wide = [b for b in batches if b > 1]
    if wide:
        cmd = [f"{args.llama_bin}/llama-batched-bench", "-m", args.model, "-t", str(args.threads), "-c", "8192",
               "-b", "2048", "-ub", "512", "-npp", "128", "-ntg", "32", "-npl", ",".join(map(str, wide))]
        for line in run(cmd).splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            # | PP | TG | B | N_KV | T_PP s | S_PP t/s | T_TG s | S_TG t/s | T s | S t/s |
            if len(cells) == 10 and cells[2].isdigit():
                result[f"decode{cells[2]}"] = float(cells[7])
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batches", default="1,8,32")
    parser.add_argument("--prompt", type=int, default=512)
    parser.add_argument("--mnemo", default="build/release/bin/mnemo")
    parser.add_argument("--llama-bin", required=True)
    parser.add_argument("--json", help="also write the rounds and medians here")
    args = parser.parse_args()
    batches = [int(b) for b in args.batches.split(",")]

    rounds = []
    for r in range(args.rounds):
        ours = mnemo_round(args, batches)
        theirs = llama_round(args, batches)
        rounds.append({"mnemo": ours, "llama.cpp": theirs})
        print(f"round {r + 1}: mnemo {ours} llama.cpp {theirs}", flush=True)

    measures = (["prefill"] if args.prompt > 0 else []) + [f"decode{b}" for b in batches]
    names = {"prefill": f"prefill pp{args.prompt}"} | {f"decode{b}": f"decode batch {b}" for b in batches}
    table = {}
    print(f"\nmodel {args.model}, {args.threads} threads, medians of {args.rounds} interleaved rounds (tokens/s)\n")
    print("| measure | llama.cpp | Mnemo | ratio |\n|---|---|---|---|")
    for key in measures:
        ours = [r["mnemo"][key] for r in rounds if key in r["mnemo"]]
        theirs = [r["llama.cpp"][key] for r in rounds if key in r["llama.cpp"]]
        if not ours or not theirs:
            continue
        a, b = statistics.median(theirs), statistics.median(ours)
        table[key] = {"llama.cpp": a, "mnemo": b, "ratio": b / a}
        print(f"| {names[key]} | {a:.1f} | {b:.1f} | {b / a:.2f}x |")
    shares = [r["mnemo"]["peak_share"] for r in rounds if "peak_share" in r["mnemo"]]
    if shares:
        table["peak_share"] = statistics.median(shares)
        print(f"\nMnemo's batch {max(batches)}: {statistics.median(shares):.0f}% of the int8 peak (median)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": args.model, "threads": args.threads, "rounds": rounds, "medians": table}, f, indent=1)


if __name__ == "__main__":
    main()
