#!/usr/bin/env python3
"""Markdown tables from `mnemo loadgen` results: sweeps, or single runs (grouped by system).

    bench/multiturn_report.py [--slo-ttft S --slo-tpot S] RESULT.json...

--slo-ttft/--slo-tpot judge the points against another SLO than the run's (from the p90s
and failures each point recorded). Prints one row per system and rate, then the highest rate meeting the SLO per system and the
comparisons docs/benchmarks.md sets as targets: Mnemo with its cache against the stateless
baseline (>= 3x the rate) and against llama-server (>= 2x), and the p50 TTFT of turns >= 2
with the cache against without (<= 20%).
"""
import argparse
import json

CACHED = "mnemo"
STATELESS = "mnemo-stateless"
PEER = "llama-server"


def meets_slo(summary, slo):
    """The rule of `mnemo loadgen` (src/loadgen/stats.h): no failure, every turn sent, p90s within."""
    def within(value, bound):
        return bound <= 0 or value <= bound
    return (summary["requests_failed"] == 0 and summary["requests_sent"] == summary["turns_planned"]
            and summary["requests_ok"] > 0 and within(summary["all"]["ttft_s"]["p90"], slo["ttft_p90_s"])
            and within(summary["all"]["tpot_s"]["p90"], slo["tpot_p90_s"]))


def load(path, slo=None):
    """A sweep's JSON (or a single run's, as a one-point sweep), judged against `slo` if given."""
    with open(path) as f:
        result = json.load(f)
    if "points" not in result:
        result = {"system": result["system"], "slo": result["summary"]["slo"], "points": [result]}
    if slo is not None:
        result["slo"] = slo
        for point in result["points"]:
            point["summary"]["slo_met"] = meets_slo(point["summary"], slo)
    return result


def load_all(paths, slo=None):
    """Every file's points, grouped by system (in the order systems first appear), by rate."""
    systems = {}
    for path in paths:
        result = load(path, slo)
        merged = systems.setdefault(result["system"], {"system": result["system"], "slo": result["slo"], "points": []})
        merged["points"].extend(result["points"])
    for merged in systems.values():
        merged["points"].sort(key=lambda p: p["rate"])
        met = [p["rate"] for p in merged["points"] if p["summary"]["slo_met"]]
        merged["max_rate_meeting_slo"] = max(met) if met else None
    order = {CACHED: 0, STATELESS: 1}
    return sorted(systems.values(), key=lambda r: (order.get(r["system"], 2), r["system"]))


def offered_requests_per_s(point):
    s = point["summary"]
    return point["rate"] * s["turns_planned"] / s["conversations"] if s["conversations"] else 0.0


def ms(seconds):
    return f"{seconds * 1000:.0f}"


def rows(results):
    yield ("| system | rate (conv/s) | conversations / requests | offered (req/s) | done (req/s) | out tok/s "
           "| TTFT p50 / p90 (s) | TTFT p50 first / later (s) | TPOT p50 / p90 (ms) | E2E p50 / p90 (s) "
           "| cached (later) | failed | SLO |")
    yield "|" + "---|" * 13
    for result in results:
        for point in result["points"]:
            s = point["summary"]
            a, first, later = s["all"], s["first_turns"], s["later_turns"]
            failed = s["requests_failed"] + s["turns_planned"] - s["requests_sent"]
            yield (f"| {result['system']} | {point['rate']:g} | {s['conversations']} / {s['turns_planned']} "
                   f"| {offered_requests_per_s(point):.3f} "
                   f"| {s['request_throughput']:.3f} | {s['output_throughput']:.1f} "
                   f"| {a['ttft_s']['p50']:.2f} / {a['ttft_s']['p90']:.2f} "
                   f"| {first['ttft_s']['p50']:.2f} / {later['ttft_s']['p50']:.2f} "
                   f"| {ms(a['tpot_s']['p50'])} / {ms(a['tpot_s']['p90'])} "
                   f"| {a['e2e_s']['p50']:.2f} / {a['e2e_s']['p90']:.2f} "
                   f"| {later['cached_share'] * 100:.0f}% | {failed} | {'met' if s['slo_met'] else 'missed'} |")


def ratio(a, b):
    return f"{a / b:.2f}x" if a and b else "n/a"


def comparisons(results):
    by_name = {r["system"]: r for r in results}
    best = {name: r["max_rate_meeting_slo"] for name, r in by_name.items()}
    # The peer at its best: any llama-server configuration run (e.g. llama-server-np4).
    peers = [name for name in best if name.startswith(PEER)]
    slo = results[0]["slo"]
    yield f"SLO: p90 TTFT <= {slo['ttft_p90_s']} s and p90 TPOT <= {slo['tpot_p90_s']} s, no failed request."
    yield ""
    yield "| system | highest rate meeting the SLO (conv/s) |"
    yield "|---|---|"
    for name, rate in best.items():
        yield f"| {name} | {rate if rate is not None else 'none of those run'} |"
    yield ""
    if CACHED in best:
        if STATELESS in best:
            yield f"- {CACHED} / {STATELESS} rate at the SLO: {ratio(best[CACHED], best[STATELESS])} (target >= 3x)"
        if peers:
            peer = max(peers, key=lambda name: best[name] or 0.0)
            yield f"- {CACHED} / {peer} rate at the SLO: {ratio(best[CACHED], best[peer])} (target >= 2x)"
    if CACHED in by_name and STATELESS in by_name:
        stateless_points = {p["rate"]: p for p in by_name[STATELESS]["points"]}
        for point in by_name[CACHED]["points"]:
            other = stateless_points.get(point["rate"])
            if other is None:
                continue
            cached = point["summary"]["later_turns"]["ttft_s"]["p50"]
            base = other["summary"]["later_turns"]["ttft_s"]["p50"]
            share = f"{cached / base * 100:.0f}%" if base else "n/a"
            yield (f"- rate {point['rate']:g}: p50 TTFT of turns >= 2, {CACHED} {cached:.2f} s vs {STATELESS} "
                   f"{base:.2f} s = {share} (target <= 20%)")


def slo_override(ttft, tpot):
    return None if ttft is None and tpot is None else {"ttft_p90_s": ttft or 0.0, "tpot_p90_s": tpot or 0.0}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", nargs="+", help="loadgen JSON files")
    parser.add_argument("--slo-ttft", type=float, help="p90 TTFT bound, seconds (default: the run's)")
    parser.add_argument("--slo-tpot", type=float, help="p90 TPOT bound, seconds (default: the run's)")
    args = parser.parse_args()
    results = load_all(args.results, slo_override(args.slo_ttft, args.slo_tpot))
    for line in rows(results):
        print(line)
    print()
    for line in comparisons(results):
        print(line)


if __name__ == "__main__":
    main()
