#!/usr/bin/env python3
"""Markdown table of routing policies from `mnemo loadgen` results (bench/run_cluster.sh).

    bench/cluster_report.py RESULT.json...

One row per policy: medians over its repeats of TTFT p50/p90/p99 (all turns, and turns >= 2),
request completion time (e2e) p50/p99, and the share of prompt tokens served from cache; then
each policy's ratio to session affinity (MemServe's baseline for prompt-tree routing), and
disaggregation with Caching-3 against without (MemServe: -58% mean TTFT from caching).
"""
import json
import statistics
import sys


def load(paths):
    runs = {}
    for path in paths:
        with open(path) as f:
            result = json.load(f)
        runs.setdefault(result["system"], []).append(result["summary"])
    return runs


def figures(summary):
    a, later = summary["all"], summary["later_turns"]
    return {
        "ttft_p50": a["ttft_s"]["p50"], "ttft_p90": a["ttft_s"]["p90"], "ttft_p99": a["ttft_s"]["p99"],
        "later_ttft_p50": later["ttft_s"]["p50"], "later_ttft_p99": later["ttft_s"]["p99"],
        "e2e_p50": a["e2e_s"]["p50"], "e2e_p99": a["e2e_s"]["p99"],
        "cached_share": a["cached_share"], "failed": summary["requests_failed"], "ok": summary["requests_ok"],
    }


def main(paths):
    runs = load(paths)
    order = {"round-robin": 0, "session": 1, "cache-aware": 2, "pd-basic": 3, "pd-caching3": 4, "pd-caching3-stream": 5}
    medians = {}
    print("| policy | repeats | requests ok (failed) | TTFT p50 | p90 | p99 | turns >= 2: TTFT p50 | p99 | e2e p50 | e2e p99 | cached share |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for policy in sorted(runs, key=lambda p: (order.get(p, 9), p)):
        rows = [figures(s) for s in runs[policy]]
        m = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
        medians[policy] = m
        print(f"| {policy} | {len(rows)} | {m['ok']:.0f} ({m['failed']:.0f}) | {m['ttft_p50']:.3f} | {m['ttft_p90']:.3f} | "
              f"{m['ttft_p99']:.3f} | {m['later_ttft_p50']:.3f} | {m['later_ttft_p99']:.3f} | {m['e2e_p50']:.2f} | "
              f"{m['e2e_p99']:.2f} | {m['cached_share']:.1%} |")
    base = medians.get("session")
    if base:
        print()
        print("Ratio to session affinity (medians):")
        print()
        print("| policy | TTFT p50 | TTFT p99 | turns >= 2 TTFT p99 | e2e p99 |")
        print("|---|---|---|---|---|")
        for policy, m in medians.items():
            def r(k):
                return f"{m[k] / base[k]:.2f}" if base[k] > 0 else "-"
            print(f"| {policy} | {r('ttft_p50')} | {r('ttft_p99')} | {r('later_ttft_p99')} | {r('e2e_p99')} |")
    basic = medians.get("pd-basic")
    for variant in ("pd-caching3", "pd-caching3-stream"):
        caching = medians.get(variant)
        if basic and caching:
            print()
            print(f"Disaggregated, {variant} over pd-basic (medians): " + ", ".join(
                f"{k} {caching[k] / basic[k]:.2f}x"
                for k in ("ttft_p50", "ttft_p99", "later_ttft_p50", "later_ttft_p99", "e2e_p50") if basic[k] > 0))


if __name__ == "__main__":
    main(sys.argv[1:])
