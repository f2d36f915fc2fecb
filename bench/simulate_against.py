#!/usr/bin/env python3
"""Ratios of `mnemo simulate` runs to a baseline run of the same settings and seeds (docs/benchmarks.md,
"the 0.5x target"): one result folder per configuration (bench/simulate_policies.sh OUT), each
with one or more policies; the baseline folder's first policy (e.g. `--policies lru --kv-types f16`)
is what every other policy's recomputed tokens are divided by, run by run (same seed).

    bench/simulate_against.py BASELINE_DIR LABEL=DIR...

Per setting (think time, device, host, disk): the baseline's recomputed tokens (lowest seed), the
turns that waited for the device and those refused (longer than it), then for each LABEL=DIR and
each of its policies the median (min-max) ratio over the seeds; last, the median of each column's
medians over the settings where the baseline recomputes anything.
"""
import glob
import json
import os
import statistics
import sys

from simulate_report import mib


def load(folder):
    runs = {}
    for path in glob.glob(os.path.join(folder, "*.json")):
        with open(path) as f:
            result = json.load(f)
        config = result["config"]
        think = config["think_time"].get("exponential_mean_s", "trace")
        caps = config["capacity_bytes"]
        runs[(think, caps["device"], caps["host"], caps["disk"], config["seed"])] = result
    return runs


def main(args):
    if len(args) < 2:
        sys.exit(__doc__)
    baseline = load(args[0])
    columns = []  # (label, policy, runs)
    for arg in args[1:]:
        label, _, folder = arg.partition("=")
        runs = load(folder)
        policies = [p["policy"] for p in next(iter(runs.values()))["policies"]] if runs else []
        for policy in policies:
            columns.append((f"{label} {policy}", policy, runs))
    settings = sorted({key[:4] for key in baseline})
    print("| think, device, host, disk | baseline recomputed | waited turns | refused turns (prompt tokens) | "
          + " | ".join(label for label, _, _ in columns) + " |")
    print("|---|---|---|---|" + "---|" * len(columns))
    medians = [[] for _ in columns]
    for s in settings:
        seeds = sorted(key[4] for key in baseline if key[:4] == s)
        first = baseline[s + (seeds[0],)]["policies"][0]
        cells = []
        for i, (_, policy, runs) in enumerate(columns):
            ratios = []
            for seed in seeds:
                base = baseline[s + (seed,)]["policies"][0]["recomputed_tokens"]
                run = runs.get(s + (seed,))
                if run is None or base == 0:
                    continue
                mine = next(p for p in run["policies"] if p["policy"] == policy)["recomputed_tokens"]
                ratios.append(mine / base)
            if ratios:
                medians[i].append(statistics.median(ratios))
                cells.append(f"{statistics.median(ratios):.3f} ({min(ratios):.2f}-{max(ratios):.2f})")
            else:
                cells.append("-")
        think, device, host, disk = s
        print(f"| {think:g} s, {mib(device)}, {mib(host)}, {mib(disk) if disk else '-'} | {first['recomputed_tokens']:,} | "
              f"{first.get('waited_turns', 0)} | {first.get('refused_turns', 0)} ({first.get('refused_prompt_tokens', 0):,}) | "
              + " | ".join(cells) + " |")
    print("| **median over the settings** | | | | "
          + " | ".join(f"**{statistics.median(m):.3f}**" if m else "-" for m in medians) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
