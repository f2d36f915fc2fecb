#!/usr/bin/env bash
# Sets up a fresh machine (packages, venv, default model), builds, and starts the Mnemo server on
# the default model (OpenAI API under /v1, web chat page at /). Arguments go to `mnemo serve`,
# e.g. scripts/run.sh --port 9000. `build/release/bin/mnemo generate -p TEXT` runs one prompt.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
scripts/setup.sh
exec build/release/bin/mnemo serve "$@"
