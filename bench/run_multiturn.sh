#!/usr/bin/env bash
# The multi-turn serving benchmark (docs/benchmarks.md): three systems on the same model, the
# same threads and the same machine, each driven by `mnemo loadgen` over the same conversation
# rates:
#   mnemo            Mnemo with its prefix cache (every turn reuses the KV of earlier ones)
#   mnemo-responses  Mnemo with its cache, driven statefully through the Responses API
#                    (previous_response_id: the server holds the history, its replies included)
#   mnemo-stateless  Mnemo with --no-prefix-cache (every turn recomputes its whole prompt)
#   mnemo-f16        Mnemo with its cache, every tier F16 (--kv-types f16; `mnemo` keeps the
#                    host and disk in q8_0, serve's default): the capacity compression buys
#   llama-server     llama.cpp's server configured for multi-turn (bench/start_llama_server.sh)
#                    (llama-server-npN in SYSTEMS: the same with N slots)
# Rates go up one at a time, and each rate runs every system in turn (a fresh server each time,
# the same conversations): on a machine shared with other work, interleaving spreads the noise
# over the systems instead of giving one system a quiet quarter of an hour and another a busy
# one. A system stops after STOP_AFTER rates in a row miss the SLO. Then it writes a table
# (table.md) and a plot (latency.png) of all three.
#
#   bench/run_multiturn.sh [OUT_DIR]          (default bench/results/multiturn-DATE)
#
# Knobs (environment): DATA (a ShareGPT-format file; default: loadgen's, the English set), RATES, DURATION, DRAIN, MAX_CONTEXT, MAX_OUTPUT, THINK, KV_TOKENS, HOST_TOKENS, DISK_BYTES, COMPACT_TOKENS, SLOTS,
# THREADS, SLO_TTFT, SLO_TPOT, STOP_AFTER, SYSTEMS, SEED, NICE, MODEL, MNEMO_BIN, LLAMA_SERVER,
# FIRST_POINT (to rerun the later rates of an earlier sweep on the same conversations).
# Needs a release build (scripts/setup.sh), llama.cpp (bench/build_llama_cpp.sh), the project
# venv with matplotlib (requirements.txt) and the data set in data/. Not part of CI.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:-$ROOT/bench/results/multiturn-$(date +%Y%m%d-%H%M%S)}
MODEL=${MODEL:-${MNEMO_CACHE:-$HOME/.cache/mnemo}/models/gemma-3-270m-q4_k_m.gguf}
MNEMO_BIN=${MNEMO_BIN:-$ROOT/build/release/bin/mnemo}
PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
THREADS=${THREADS:-2}
RATES=${RATES:-0.1,0.2,0.4}
DURATION=${DURATION:-60}             # conversations arrive for this many seconds at each rate ...
DRAIN=${DRAIN:-90}                   # ... and the started ones get this long after it
MAX_CONTEXT=${MAX_CONTEXT:-1024}
MAX_OUTPUT=${MAX_OUTPUT:-64}
THINK=${THINK:-2}                    # mean think time between turns, seconds
KV_TOKENS=${KV_TOKENS:-4096}         # device-tier KV of both servers: below the working set
SLOTS=${SLOTS:-8}                    # Mnemo --max-running = llama-server -np
SLO_TTFT=${SLO_TTFT:-2}
SLO_TPOT=${SLO_TPOT:-0.25}
STOP_AFTER=${STOP_AFTER:-1}          # stop a system's sweep after this many rates miss the SLO
SYSTEMS=${SYSTEMS:-mnemo mnemo-stateless llama-server}
HOST_TOKENS=${HOST_TOKENS:-}         # Mnemo's --host-swap-tokens (empty: serve's default)
DISK_BYTES=${DISK_BYTES:-}           # Mnemo's --disk-cache-bytes (empty: serve's default)
COMPACT_TOKENS=${COMPACT_TOKENS:-}   # Mnemo's --host-compact-tokens (empty: serve's default)
SEED=${SEED:-1}
DATA=${DATA:-}                       # empty: loadgen's default data set
FIRST_POINT=${FIRST_POINT:-0}        # rate i of RATES replays conversations from (FIRST_POINT + i) x 100
# Priority of the servers and the load generator over other work on the machine (2 shared
# cores): a descheduled kernel thread stalls its sibling at every barrier. Negative values need
# root; otherwise nice warns and runs at the normal priority.
NICE=${NICE:--10}
export MODEL THREADS KV_TOKENS SLOTS

mkdir -p "$OUT"
SERVER_PID=
stop_server() {
  if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill -TERM "$SERVER_PID"
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  SERVER_PID=
}
trap stop_server EXIT

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

wait_ready() {  # URL LOG
  for _ in $(seq 1 240); do
    if curl -sf "$1/health" > /dev/null 2>&1 && curl -sf "$1/v1/models" > /dev/null 2>&1; then return 0; fi
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then echo "server exited; see $2" >&2; return 1; fi
    sleep 0.5
  done
  echo "server not ready after 120 s; see $2" >&2
  return 1
}

start_system() {  # NAME PORT
  local log=$OUT/$1.server.log  # appended to, one server per rate
  case $1 in
    mnemo | mnemo-responses | mnemo-stateless | mnemo-f16)
      local extra=()
      [ "$1" = mnemo-stateless ] && extra=(--no-prefix-cache)
      [ "$1" = mnemo-f16 ] && extra=(--kv-types f16)
      [ -n "$HOST_TOKENS" ] && extra+=(--host-swap-tokens "$HOST_TOKENS")
      [ -n "$DISK_BYTES" ] && extra+=(--disk-cache-bytes "$DISK_BYTES")
      [ -n "$COMPACT_TOKENS" ] && extra+=(--host-compact-tokens "$COMPACT_TOKENS")
      nice -n "$NICE" "$MNEMO_BIN" serve -m "$MODEL" --host 127.0.0.1 --port "$2" -t "$THREADS" --kv-tokens "$KV_TOKENS" \
        --max-running "$SLOTS" --state-dir "$OUT/state-$1" "${extra[@]}" >> "$log" 2>&1 &
      ;;
    llama-server | llama-server-np*)  # llama-server-npN: N slots instead of SLOTS
      local slots=$SLOTS
      [[ $1 == llama-server-np* ]] && slots=${1#llama-server-np}
      SLOTS=$slots nice -n "$NICE" "$ROOT/bench/start_llama_server.sh" "$2" >> "$log" 2>&1 &
      ;;
    *) echo "unknown system $1" >&2; return 1 ;;
  esac
  SERVER_PID=$!
  wait_ready "http://127.0.0.1:$2" "$log"
}

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "mnemo: $(git -C "$ROOT" rev-parse --short HEAD)$(git -C "$ROOT" diff --quiet || echo ' (uncommitted changes)')"
  echo "llama.cpp: $("${LLAMA_SERVER:-$HOME/.cache/mnemo/llama.cpp/build/bin/llama-server}" --version 2>&1 | grep -m1 version)"
  echo "model: $MODEL"
  echo "cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores visible"
  echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "settings: rates $RATES, conversations arriving for $DURATION s per rate (drain $DRAIN s), max context $MAX_CONTEXT, max output $MAX_OUTPUT," \
       "think time $THINK s, KV $KV_TOKENS tokens (host ${HOST_TOKENS:-default}, compact ${COMPACT_TOKENS:-default}, disk ${DISK_BYTES:-default}), $SLOTS slots, $THREADS threads, nice $NICE," \
       "SLO p90 TTFT $SLO_TTFT s, p90 TPOT $SLO_TPOT s, data ${DATA:-the default (English)}"
} | tee -a "$OUT/machine.txt"

declare -A violations
point=$FIRST_POINT
for rate in ${RATES//,/ }; do
  for system in $SYSTEMS; do
    if [ "${violations[$system]:-0}" -ge "$STOP_AFTER" ] && [ "$STOP_AFTER" -gt 0 ]; then continue; fi
    port=$(free_port)
    echo "== $system at $rate conversations/s (port $port, load $(cut -d' ' -f1 /proc/loadavg))"
    start_system "$system" "$port"
    # Each rate replays its own conversations (every system the same ones): a server must not
    # find a rate's conversations cached from the one before.
    result=$OUT/$system-rate$rate
    api=chat
    [ "$system" = mnemo-responses ] && api=responses
    data=()
    [ -n "$DATA" ] && data=(--data "$DATA")
    nice -n "$NICE" "$MNEMO_BIN" loadgen --url "http://127.0.0.1:$port" --label "$system" --api "$api" --tokenizer-model "$MODEL" \
      --rate "$rate" -n 0 --duration "$DURATION" --drain-timeout "$DRAIN" --conversation-offset $((point * 100)) \
      --max-context "$MAX_CONTEXT" --max-output-tokens "$MAX_OUTPUT" --think-time "$THINK" \
      --slo-ttft-p90 "$SLO_TTFT" --slo-tpot-p90 "$SLO_TPOT" --seed "$SEED" "${data[@]}" --json "$result.json" --csv "$result.csv" \
      | tee "$result.txt"
    stop_server
    if grep -q '"slo_met": true' "$result.json"; then
      violations[$system]=0
    else
      violations[$system]=$((${violations[$system]:-0} + 1))
    fi
  done
  point=$((point + 1))
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/machine.txt"
for log in "$OUT"/llama-server*.server.log; do
  [ -f "$log" ] || continue
  echo "$(basename "$log" .server.log) full prompt re-processing events: $(grep -c 'forcing full prompt re-processing' "$log" || true)" \
    | tee -a "$OUT/machine.txt"
done

"$PYTHON" "$ROOT/bench/multiturn_report.py" "$OUT"/*-rate*.json | tee "$OUT/table.md"
"$PYTHON" "$ROOT/bench/plot_latency.py" --output "$OUT/latency.png" "$OUT"/*-rate*.json
echo "results in $OUT"
