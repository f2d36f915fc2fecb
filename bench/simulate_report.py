#!/usr/bin/env python3
"""Markdown tables from `mnemo simulate --json` results (bench/simulate_policies.sh).

    bench/simulate_report.py RESULT.json...

Runs that differ only in their seed form one setting. The first table gives, per setting, the
recomputed tokens of each policy in the run with the lowest seed and their ratio to LRU (with the
device overcommits of that run, equal for every policy, and LRU's hit rate as a measure of
pressure); the
second, the ratio to LRU over all seeds of the setting: median (min-max), in tokens and, for
Pensieve (which weighs cost), in recompute seconds under the run's cost model.
"""
import json
import statistics
import sys

POLICIES = ["pensieve", "lru", "tail-first", "oracle"]


def mib(n):
    return f"{n / 2**20:g}M" if n < 2**30 else f"{n / 2**30:g}G"


def setting(config):
    caps = config["capacity_bytes"]
    return (config["think_time"].get("exponential_mean_s", 0), caps["device"], caps["host"], caps["disk"], config["rate"])


def main(paths):
    runs = {}
    for path in paths:
        with open(path) as f:
            result = json.load(f)
        runs.setdefault(setting(result["config"]), []).append(result)
    for key in runs:
        runs[key].sort(key=lambda r: r["config"]["seed"])

    print("| think mean | device | host | disk | overcommits | LRU hit rate | " + " | ".join(POLICIES) + " |")
    print("|---|---|---|---|---|---|" + "---|" * len(POLICIES))
    for key in sorted(runs):
        think, device, host, disk, _ = key
        first = runs[key][0]
        by_name = {p["policy"]: p for p in first["policies"]}
        cells = []
        for name in POLICIES:
            p = by_name.get(name)
            if p is None:
                cells.append("-")
                continue
            ratio = p["recomputed_vs_lru"]
            cells.append(f"{p['recomputed_tokens']:,} ({ratio:.3f})" if ratio is not None else f"{p['recomputed_tokens']:,}")
        lru_hit = by_name["lru"]["hit_rate"] if "lru" in by_name else None
        overcommits = first["policies"][0]["device_overcommits"]
        print(f"| {think:g} s | {mib(device)} | {mib(host)} | {mib(disk) if disk else '-'} | {overcommits} | "
              f"{'-' if lru_hit is None else f'{100 * lru_hit:.1f}%'} | " + " | ".join(cells) + " |")

    print()
    print("| think mean | device | host | disk | seeds | " + " | ".join(f"{p} / LRU" for p in POLICIES if p != "lru")
          + " | pensieve / LRU, seconds |")
    print("|---|---|---|---|---|" + "---|" * len(POLICIES))
    for key in sorted(runs):
        think, device, host, disk, _ = key
        cells = []
        for name in POLICIES:
            if name == "lru":
                continue
            ratios = [p["recomputed_vs_lru"] for r in runs[key] for p in r["policies"]
                      if p["policy"] == name and p["recomputed_vs_lru"] is not None]
            cells.append(f"{statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f})" if ratios else "-")
        seconds = []
        for r in runs[key]:
            by_name = {p["policy"]: p for p in r["policies"]}
            if "pensieve" in by_name and "lru" in by_name and by_name["lru"]["recomputed_seconds"] > 0:
                seconds.append(by_name["pensieve"]["recomputed_seconds"] / by_name["lru"]["recomputed_seconds"])
        cells.append(f"{statistics.median(seconds):.3f} ({min(seconds):.3f}-{max(seconds):.3f})" if seconds else "-")
        seeds = ",".join(str(r["config"]["seed"]) for r in runs[key])
        print(f"| {think:g} s | {mib(device)} | {mib(host)} | {mib(disk) if disk else '-'} | {seeds} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
