#!/usr/bin/env bash
# Sets up a fresh machine (packages, venv, default model), builds, and runs Mnemo on the default
# model. Arguments are passed to `mnemo generate`; without any, it continues a demo prompt.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
scripts/setup.sh
if [ $# -eq 0 ]; then
  set -- -p "The three most useful things to know about caching are" -n 64 --stats
fi
exec build/release/bin/mnemo generate "$@"
