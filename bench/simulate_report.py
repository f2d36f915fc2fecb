#!/usr/bin/env python3
"""Markdown tables from `mnemo simulate --json` results (bench/simulate_policies.sh).

    bench/simulate_report.py RESULT.json...

Runs that differ only in their seed form one setting. The first table gives, per setting, the
recomputed tokens of each policy in the run with the lowest seed and their ratio to LRU (with
the turns that waited for the device in that run, and LRU's hit rate, as measures of pressure); the
second, the ratio to LRU over all seeds of the setting: median (min-max), in tokens and, for
Pensieve (which weighs cost) and mnemo, in recompute seconds under the run's cost model. Last, per
policy, in how many runs it recomputed fewer tokens than LRU, as many, and more.
"""
import json
import statistics
import sys

POLICIES = ["pensieve", "lru", "tail-first", "mnemo", "oracle"]
FIRST_TABLE = ["pensieve", "lru", "tail-first", "mnemo", "oracle"]
SECONDS = ["pensieve", "mnemo"]


def mib(n):
    return f"{n / 2**20:g}M" if n < 2**30 else f"{n / 2**30:g}G"


def setting(config):
    caps = config["capacity_bytes"]
    think = config["think_time"]
    # Exponential means first, then the Mooncake gaps (by their scale).
    kind = (0, think["exponential_mean_s"]) if "exponential_mean_s" in think else (1, think.get("scale", 1.0))
    return (kind, caps["device"], caps["host"], caps["disk"], config["rate"])


def think_label(kind):
    if kind[0] == 0:
        return f"{kind[1]:g} s"
    return "Mooncake" if kind[1] == 1 else f"Mooncake x{kind[1]:g}"


def main(paths):
    runs = {}
    for path in paths:
        with open(path) as f:
            result = json.load(f)
        runs.setdefault(setting(result["config"]), []).append(result)
    for key in runs:
        runs[key].sort(key=lambda r: r["config"]["seed"])

    print("| think time | device | host | disk | waited turns | LRU hit rate | " + " | ".join(FIRST_TABLE) + " |")
    print("|---|---|---|---|---|---|" + "---|" * len(FIRST_TABLE))
    for key in sorted(runs):
        think, device, host, disk, _ = key
        first = runs[key][0]
        by_name = {p["policy"]: p for p in first["policies"]}
        cells = []
        for name in FIRST_TABLE:
            p = by_name.get(name)
            if p is None:
                cells.append("-")
                continue
            ratio = p["recomputed_vs_lru"]
            cells.append(f"{p['recomputed_tokens']:,} ({ratio:.3f})" if ratio is not None else f"{p['recomputed_tokens']:,}")
        lru_hit = by_name["lru"]["hit_rate"] if "lru" in by_name else None
        waited = first["policies"][0].get("waited_turns", "-")
        print(f"| {think_label(think)} | {mib(device)} | {mib(host)} | {mib(disk) if disk else '-'} | {waited} | "
              f"{'-' if lru_hit is None else f'{100 * lru_hit:.1f}%'} | " + " | ".join(cells) + " |")

    print()
    print("| think time | device | host | disk | seeds | " + " | ".join(f"{p} / LRU" for p in POLICIES if p != "lru")
          + " | " + " | ".join(f"{p} / LRU, seconds" for p in SECONDS) + " |")
    print("|---|---|---|---|---|" + "---|" * (len(POLICIES) - 1 + len(SECONDS)))
    for key in sorted(runs):
        think, device, host, disk, _ = key
        cells = []
        for name in POLICIES:
            if name == "lru":
                continue
            ratios = [p["recomputed_vs_lru"] for r in runs[key] for p in r["policies"]
                      if p["policy"] == name and p["recomputed_vs_lru"] is not None]
            cells.append(f"{statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f})" if ratios else "-")
        for name in SECONDS:
            seconds = []
            for r in runs[key]:
                by_name = {p["policy"]: p for p in r["policies"]}
                if name in by_name and "lru" in by_name and by_name["lru"]["recomputed_seconds"] > 0:
                    seconds.append(by_name[name]["recomputed_seconds"] / by_name["lru"]["recomputed_seconds"])
            cells.append(f"{statistics.median(seconds):.3f} ({min(seconds):.3f}-{max(seconds):.3f})" if seconds else "-")
        seeds = ",".join(str(r["config"]["seed"]) for r in runs[key])
        print(f"| {think_label(think)} | {mib(device)} | {mib(host)} | {mib(disk) if disk else '-'} | {seeds} | "
              + " | ".join(cells) + " |")

    print()
    print("| policy | runs | fewer tokens than LRU | as many | more |")
    print("|---|---|---|---|---|")
    for name in POLICIES:
        if name == "lru":
            continue
        counts = [0, 0, 0]
        for key in runs:
            for r in runs[key]:
                by_name = {p["policy"]: p for p in r["policies"]}
                if name not in by_name or "lru" not in by_name:
                    continue
                mine, lru = by_name[name]["recomputed_tokens"], by_name["lru"]["recomputed_tokens"]
                counts[0 if mine < lru else 1 if mine == lru else 2] += 1
        if sum(counts):
            print(f"| {name} | {sum(counts)} | {counts[0]} | {counts[1]} | {counts[2]} |")


if __name__ == "__main__":
    main(sys.argv[1:])
