#!/usr/bin/env bash
# Starts llama.cpp's llama-server configured at its best for multi-turn chat on a small CPU
# machine, as the peer of bench/run_multiturn.sh:
#   - prompt cache on (--cache-prompt; each slot keeps its last conversation's KV), and a
#     host-RAM prompt cache (--cache-ram) where conversations of idle slots are parked;
#   - --swa-full: Gemma 3's sliding-window layers keep full-length KV, so a new turn can resume
#     from any earlier position (without it, reuse often fails and the whole prompt is redone);
#   - continuous batching over SLOTS slots sharing one unified KV pool (-kvu) of KV_TOKENS
#     tokens, the same device-tier size and running-set size as Mnemo's;
#   - the same threads as Mnemo for generation and prompt processing, waiting for work without
#     busy polling (--poll 0): the default (50) spins, and on 2 shared cores a spinning thread
#     takes the core its sibling needs (measured: decode 4x slower with the default);
#   - the Gemma chat template: the default model's GGUF carries none, and llama-server would
#     fall back to ChatML (wrong for Gemma, and its markers become plain-text tokens); Mnemo
#     falls back to its built-in Gemma template, so both render the same prompt. Built-in
#     template names work only without --jinja (with it, "gemma" is taken as template text).
#   bench/start_llama_server.sh PORT  (env: MODEL, THREADS, KV_TOKENS, SLOTS, CACHE_RAM_MIB, CHAT_TEMPLATE)
set -euo pipefail
PORT=${1:?usage: start_llama_server.sh PORT}
LLAMA_SERVER=${LLAMA_SERVER:-$HOME/.cache/mnemo/llama.cpp/build/bin/llama-server}
MODEL=${MODEL:-${MNEMO_CACHE:-$HOME/.cache/mnemo}/models/gemma-3-270m-q4_k_m.gguf}
THREADS=${THREADS:-2}
KV_TOKENS=${KV_TOKENS:-4096}
SLOTS=${SLOTS:-8}
CACHE_RAM_MIB=${CACHE_RAM_MIB:-1152}  # ~64k tokens at 18 KiB/token, like Mnemo's host tier
CHAT_TEMPLATE=${CHAT_TEMPLATE:-gemma}
exec "$LLAMA_SERVER" -m "$MODEL" --host 127.0.0.1 --port "$PORT" \
  -t "$THREADS" -tb "$THREADS" --poll 0 -np "$SLOTS" -kvu -c "$KV_TOKENS" \
  --swa-full --cache-prompt -cb --cache-ram "$CACHE_RAM_MIB" \
  --no-jinja --chat-template "$CHAT_TEMPLATE" --no-webui --metrics
