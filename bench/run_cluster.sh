#!/usr/bin/env bash
# Routing policies on a cluster (docs/benchmarks.md, "Cluster routing"): a real etcd, INSTANCES
# `mnemo serve --cluster` instances on the default model and `mnemo route` in front, driven by
# `mnemo loadgen` through the router with ShareGPT conversations and think times. Every policy
# gets fresh instances (empty caches) and the same conversations:
#   round-robin   requests in turn, whatever they share
#   session       a conversation stays on one instance (rendezvous hashing on its first message)
#   cache-aware   argmin over instances of (requests in flight x REQUEST_SECONDS + uncached prompt
#                 tokens / PREFILL_TPS), the cached prefix from the router's prompt trees
#   pd-basic      disaggregated (SPEC D4): instance 1 --role prefill, the others --role decode; a
#                 prompt's KV goes from prefill to decode, nothing comes back (--caching3 false)
#   pd-caching3   the same with MemServe's Caching-3: decode sends each request's KV back to prefill,
#                 in one message when the request ends
#   pd-caching3-stream  Caching-3 sending it back chunk by chunk while the request decodes
# Repeats REPEATS times with policies interleaved, then writes table.md (medians over repeats).
#
#   bench/run_cluster.sh [OUT_DIR]        (default bench/results/cluster-DATE)
#
# Knobs (environment): POLICIES, INSTANCES, THREADS (per instance), RATE, DURATION, DRAIN,
# MAX_CONTEXT, MAX_OUTPUT, THINK, KV_TOKENS, SLOTS, REPEATS, SEED, MODEL, MNEMO_BIN,
# PREFILL_TPS, REQUEST_SECONDS, TOKENIZE (1: the router gets --model and follows the instances'
# caches by their events instead of text prompt trees), HISTORY (dataset: later turns carry the
# data set's replies, the same prompts for every policy; model: the model's own replies, as a chat
# client sends them, so a turn's generated KV can be reused). Needs a release build and etcd
# (scripts/setup.sh). Not part of CI.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:-$ROOT/bench/results/cluster-$(date +%Y%m%d-%H%M%S)}
MODEL=${MODEL:-${MNEMO_CACHE:-$HOME/.cache/mnemo}/models/gemma-3-270m-q4_k_m.gguf}
MNEMO_BIN=${MNEMO_BIN:-$ROOT/build/release/bin/mnemo}
PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
POLICIES=${POLICIES:-round-robin session cache-aware}
INSTANCES=${INSTANCES:-2}
THREADS=${THREADS:-1}
RATE=${RATE:-0.1}
DURATION=${DURATION:-90}
DRAIN=${DRAIN:-120}
MAX_CONTEXT=${MAX_CONTEXT:-1024}
MAX_OUTPUT=${MAX_OUTPUT:-32}
THINK=${THINK:-5}
KV_TOKENS=${KV_TOKENS:-4096}
SLOTS=${SLOTS:-8}
REPEATS=${REPEATS:-3}
SEED=${SEED:-1}
PREFILL_TPS=${PREFILL_TPS:-500}
REQUEST_SECONDS=${REQUEST_SECONDS:-1}
TOKENIZE=${TOKENIZE:-0}
HISTORY=${HISTORY:-dataset}

mkdir -p "$OUT"
PIDS=()
stop_all() {
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  PIDS=()
}
trap stop_all EXIT
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_url() {  # URL WHAT
  for _ in $(seq 1 240); do
    if curl -sf "$1" > /dev/null 2>&1; then return 0; fi
    sleep 0.5
  done
  echo "$2 not ready after 120 s" >&2
  return 1
}

ETCD_PORT=$(free_port)
ETCD_PEER=$(free_port)
ETCD_URL=http://127.0.0.1:$ETCD_PORT
etcd --name bench --data-dir "$OUT/etcd" --listen-client-urls "$ETCD_URL" --advertise-client-urls "$ETCD_URL" \
  --listen-peer-urls "http://127.0.0.1:$ETCD_PEER" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER" \
  --initial-cluster "bench=http://127.0.0.1:$ETCD_PEER" > "$OUT/etcd.log" 2>&1 &
ETCD_PID=$!
trap 'stop_all; kill $ETCD_PID 2>/dev/null || true' EXIT
wait_url "$ETCD_URL/health" etcd

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "mnemo: $(git -C "$ROOT" rev-parse --short HEAD)$(git -C "$ROOT" diff --quiet || echo ' (uncommitted changes)')"
  echo "cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores visible; load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "settings: $INSTANCES instances x $THREADS threads, rate $RATE conversations/s for $DURATION s (drain $DRAIN s)," \
       "max context $MAX_CONTEXT, max output $MAX_OUTPUT, think $THINK s, KV $KV_TOKENS tokens per instance, $SLOTS slots," \
       "cost model $PREFILL_TPS prefill tokens/s and $REQUEST_SECONDS s per request in flight, $REPEATS repeats," \
       "router tokenizes: $TOKENIZE, history: $HISTORY"
} | tee "$OUT/machine.txt"

run=0
for repeat in $(seq 1 "$REPEATS"); do
  for policy in $POLICIES; do
    cluster=bench-$run
    run=$((run + 1))
    echo "== $policy, repeat $repeat (cluster $cluster)"
    route_policy=$policy
    route_extra=()
    if [ "$TOKENIZE" = 1 ]; then route_extra+=(--model "$MODEL"); fi
    first_role=colocated
    other_role=colocated
    case $policy in
      pd-basic|pd-caching3|pd-caching3-stream)
        route_policy=cache-aware
        first_role=prefill
        other_role=decode
        case $policy in
          pd-caching3) route_extra+=(--caching3 true --caching3-at-end true) ;;
          pd-caching3-stream) route_extra+=(--caching3 true --caching3-at-end false) ;;
          *) route_extra+=(--caching3 false) ;;
        esac ;;
    esac
    for i in $(seq 1 "$INSTANCES"); do
      port=$(free_port)
      role=$other_role
      if [ "$i" = 1 ]; then role=$first_role; fi
      "$MNEMO_BIN" serve -m "$MODEL" --host 127.0.0.1 --port "$port" -t "$THREADS" --kv-tokens "$KV_TOKENS" \
        --max-running "$SLOTS" --state-dir "$OUT/state-$cluster-$i" --cluster "$ETCD_URL" --cluster-name "$cluster" \
        --role "$role" >> "$OUT/$policy.instance$i.log" 2>&1 &
      PIDS+=($!)
      wait_url "http://127.0.0.1:$port/health" "instance $i"
    done
    router_port=$(free_port)
    "$MNEMO_BIN" route --cluster "$ETCD_URL" --cluster-name "$cluster" --port "$router_port" --policy "$route_policy" \
      --prefill-tokens-per-second "$PREFILL_TPS" --request-seconds "$REQUEST_SECONDS" "${route_extra[@]}" \
      >> "$OUT/$policy.router.log" 2>&1 &
    PIDS+=($!)
    wait_url "http://127.0.0.1:$router_port/health" router
    result=$OUT/$policy-repeat$repeat
    "$MNEMO_BIN" loadgen --url "http://127.0.0.1:$router_port" --label "$policy" --tokenizer-model "$MODEL" \
      --rate "$RATE" -n 0 --duration "$DURATION" --drain-timeout "$DRAIN" --max-context "$MAX_CONTEXT" \
      --max-output-tokens "$MAX_OUTPUT" --think-time "$THINK" --history "$HISTORY" --seed "$SEED" -q --json "$result.json" | tee "$result.txt"
    curl -s "http://127.0.0.1:$router_port/metrics" > "$result.router-metrics.txt"
    stop_all
    rm -rf "$OUT"/state-"$cluster"-*  # the instances' KV disk tiers: large, and not results
  done
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/machine.txt"
kill $ETCD_PID 2>/dev/null || true
wait $ETCD_PID 2>/dev/null || true
rm -rf "$OUT/etcd"
"$PYTHON" "$ROOT/bench/cluster_report.py" "$OUT"/*-repeat*.json | tee "$OUT/table.md"
echo "results in $OUT"
