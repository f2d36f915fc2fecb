#!/usr/bin/env python3
"""Latency against load for several systems on one chart (PNG), from `mnemo loadgen` results.

    bench/plot_latency.py --output latency.png mnemo.json mnemo-stateless.json llama-server.json

Each input is the JSON of `mnemo loadgen sweep` or of a single run; points are grouped by the
system they name. Three panels share the x axis, the conversation arrival rate (each rate's
conversations are the same for every system, so systems compare at equal x; the requests per
second also depend on how many turns that rate's conversations have: see the table):
p50 (solid) and p90 (dashed) TTFT of all requests, p50 TTFT of turns >= 2 alone (where reuse
of earlier turns shows), and p50/p90 end-to-end latency. Filled markers: the point met the
SLO; hollow: it missed. The SLO's TTFT bound is the dotted line. Needs matplotlib (the project
venv: requirements.txt).
"""
import argparse
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FormatStrFormatter, NullFormatter  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from multiturn_report import load_all, slo_override  # noqa: E402


def draw(ax, xs, ys, met, color, style, label):
    ax.plot(xs, ys, style, color=color, label=label)
    for x, y, ok in zip(xs, ys, met):
        ax.plot([x], [y], "o", color=color, markerfacecolor=color if ok else "white", markersize=6)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", nargs="+", help="loadgen JSON files")
    parser.add_argument("--output", required=True, help="PNG to write")
    parser.add_argument("--title", default="Multi-turn serving: latency against load")
    parser.add_argument("--slo-ttft", type=float, help="p90 TTFT bound, seconds (default: the run's)")
    parser.add_argument("--slo-tpot", type=float, help="p90 TPOT bound, seconds (default: the run's)")
    args = parser.parse_args()

    fig, (ttft_ax, later_ax, e2e_ax) = plt.subplots(1, 3, figsize=(16, 5))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    slo = None
    for i, result in enumerate(load_all(args.results, slo_override(args.slo_ttft, args.slo_tpot))):
        system, slo = result["system"], result["slo"]
        points = sorted(result["points"], key=lambda p: p["rate"])
        xs = [p["rate"] for p in points]
        met = [p["summary"]["slo_met"] for p in points]
        s = [p["summary"] for p in points]
        color = colors[i % len(colors)]
        draw(ttft_ax, xs, [x["all"]["ttft_s"]["p50"] for x in s], met, color, "-", f"{system} p50")
        draw(ttft_ax, xs, [x["all"]["ttft_s"]["p90"] for x in s], met, color, "--", f"{system} p90")
        draw(later_ax, xs, [x["later_turns"]["ttft_s"]["p50"] for x in s], met, color, "-", f"{system} p50")
        draw(e2e_ax, xs, [x["all"]["e2e_s"]["p50"] for x in s], met, color, "-", f"{system} p50")
        draw(e2e_ax, xs, [x["all"]["e2e_s"]["p90"] for x in s], met, color, "--", f"{system} p90")

    if slo and slo.get("ttft_p90_s", 0) > 0:
        ttft_ax.axhline(slo["ttft_p90_s"], color="gray", linestyle=":", label=f"SLO p90 TTFT {slo['ttft_p90_s']:g} s")
    for ax, title in ((ttft_ax, "TTFT, all requests"), (later_ax, "TTFT, turns >= 2 (p50)"),
                      (e2e_ax, "End-to-end latency")):
        ax.set_title(title)
        ax.set_xlabel("conversation arrival rate (conversations/s)")
        ax.set_ylabel("seconds")
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(args.title + " (filled: SLO met, hollow: missed)")
    fig.tight_layout()
    fig.savefig(args.output, dpi=110)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
