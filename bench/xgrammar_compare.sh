#!/usr/bin/env bash
# XGrammar's token mask side by side with ours (docs/benchmarks.md, "Constrained decoding"):
# builds XGrammar's C++ core (PyPI sdist, pinned below; no Python bindings, no Python at run
# time) as a static library, builds bench/xgrammar/ against it and Mnemo's grammar libraries
# from build/release, and runs it on both vocabularies (Gemma 3 270M, SmolLM2).
#   bench/xgrammar_compare.sh [JSON_OUT]    (default bench/results/xgrammar_compare.json)
# Everything it downloads and builds lies under build/xgrammar/ (ignored); nothing in the
# project's own CMake configuration refers to XGrammar. Needs the model cache (scripts/setup.sh)
# and a configured build/release. JOBS (default 2) caps the parallel compile jobs.
set -euo pipefail
VERSION=0.2.8
SHA256=8305646fd2b319d6c3003f51a1665e54cbbe9cba1fb636bc41d0b46434ccbb80
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=$ROOT/build/xgrammar
JOBS=${JOBS:-2}
OUT_JSON=${1:-$ROOT/bench/results/xgrammar_compare.json}
PIP=${PIP:-$ROOT/.venv/bin/pip}
mkdir -p "$WORK/dl" "$(dirname "$OUT_JSON")"

# (a) The source release (pip reads its metadata in an isolated build environment; nothing is
# installed into the venv).
SDIST=$WORK/dl/xgrammar-$VERSION.tar.gz
[ -f "$SDIST" ] || "$PIP" download -q --no-deps --no-binary xgrammar "xgrammar==$VERSION" -d "$WORK/dl"
echo "$SHA256  $SDIST" | sha256sum -c --quiet
SRC=$WORK/xgrammar-$VERSION
[ -d "$SRC" ] || tar xzf "$SDIST" -C "$WORK"

# (b) Its C++ core, a static library. The sdist's cmake/config.cmake turns the Python bindings
# ON with a plain set() (which a -D cannot override); a config.cmake in the build folder comes
# first. XGrammar keeps its own flags (-O3, -flto=auto), less -Werror (GCC 12 may warn where
# the authors' compiler did not); gcc-ar/gcc-ranlib index its LTO objects.
XG_BUILD=$WORK/build
mkdir -p "$XG_BUILD"
cat > "$XG_BUILD/config.cmake" <<'EOF'
set(XGRAMMAR_BUILD_PYTHON_BINDINGS OFF)
set(XGRAMMAR_BUILD_CXX_TESTS OFF)
set(XGRAMMAR_ENABLE_CPPTRACE OFF)
set(XGRAMMAR_ENABLE_COVERAGE OFF)
set(XGRAMMAR_ENABLE_INTERNAL_CHECK OFF)
EOF
cmake -S "$SRC" -B "$XG_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_FLAGS="-Wno-error" -DCMAKE_AR="$(command -v gcc-ar)" -DCMAKE_RANLIB="$(command -v gcc-ranlib)" \
  > "$WORK/xgrammar_cmake.log"
cmake --build "$XG_BUILD" --target xgrammar -j"$JOBS"

# (c) Mnemo's libraries the comparison links (the release build's, brought up to date), then the
# comparison program.
cmake --build "$ROOT/build/release" --target mnemo_grammar mnemo_gguf mnemo_util -j"$JOBS"
CMP_BUILD=$WORK/compare
cmake -S "$ROOT/bench/xgrammar" -B "$CMP_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DMNEMO_BUILD_DIR="$ROOT/build/release" -DXGRAMMAR_SOURCE_DIR="$SRC" -DXGRAMMAR_BUILD_DIR="$XG_BUILD" \
  > "$WORK/compare_cmake.log"
cmake --build "$CMP_BUILD" -j"$JOBS"

# (d) The run: one thread each.
echo "== machine"
lscpu | grep -E '^Model name|^CPU\(s\)' || true
uptime
"$CMP_BUILD/xgrammar_mask_compare" --json "$OUT_JSON"
echo "JSON: $OUT_JSON"
