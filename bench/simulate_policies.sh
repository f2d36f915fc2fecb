#!/usr/bin/env bash
# The cache policy simulation of docs/benchmarks.md ("Cache policy simulation"): `mnemo simulate`
# on the English ShareGPT set for each think-time mean, tier capacity set and seed, one JSON per
# run, then the Markdown tables (bench/simulate_report.py).
#
#   bench/simulate_policies.sh [OUT]        (default OUT: bench/results/simulate)
#
# (`mnemo simulate` models the default model's sliding window; EXTRA="--sliding-window 0" turns it off.)
# Knobs (environment): MNEMO_BIN, RATE (conversations/s), THINKS (exponential means in seconds, or
# "mooncake": the turn gaps of MOONCAKE_TRACE), CAPACITIES (device:host[:disk] byte sizes), SEEDS,
# EXTRA (more `mnemo simulate` flags).
set -euo pipefail
cd "$(dirname "$0")/.."
MNEMO_BIN=${MNEMO_BIN:-build/release/bin/mnemo}
OUT=${1:-bench/results/simulate}
RATE=${RATE:-0.1}
THINKS=${THINKS:-"60 300 mooncake"}
MOONCAKE_TRACE=${MOONCAKE_TRACE:-data/mooncake_conversation_trace.jsonl}
CAPACITIES=${CAPACITIES:-"96M:192M 128M:256M 128M:512M 256M:512M 256M:1G 128M:256M:1G"}
SEEDS=${SEEDS:-"1 2 3 4 5"}
EXTRA=${EXTRA:-}
mkdir -p "$OUT"
for think in $THINKS; do
  if [ "$think" = mooncake ]; then think_flags=(--think-time-trace "$MOONCAKE_TRACE"); else think_flags=(--think-mean "$think"); fi
  for capacity in $CAPACITIES; do
    IFS=: read -r device host disk <<<"$capacity"
    disk=${disk:-0}
    for seed in $SEEDS; do
      name="$OUT/think${think}-device${device}-host${host}-disk${disk}-seed${seed}"
      # shellcheck disable=SC2086  # EXTRA is a list of flags
      "$MNEMO_BIN" simulate --rate "$RATE" "${think_flags[@]}" --device-bytes "$device" --host-bytes "$host" \
        --disk-bytes "$disk" --seed "$seed" --json "$name.json" $EXTRA >"$name.txt"
    done
  done
done
python3 bench/simulate_report.py "$OUT"/*.json | tee "$OUT/table.md"
