#!/usr/bin/env bash
# Builds llama.cpp (the benchmark and fidelity peer) from the source vendored in the PyPI sdist of
# llama-cpp-python, pinned below, and installs the Python binding against that build. Not used by
# CI: the fixtures it helps produce are committed (tests/fixtures/). Takes ~15 min on 2 cores.
#   bench/build_llama_cpp.sh [WORKDIR]     (default ~/.cache/mnemo/llama.cpp)
set -euo pipefail
VERSION=0.3.36
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=${1:-$HOME/.cache/mnemo/llama.cpp}
mkdir -p "$WORK"
VENV=$WORK/venv
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip
if [ ! -d "$WORK/llama_cpp_python-$VERSION" ]; then
  "$VENV/bin/pip" download -q --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$WORK/sd"
  tar xzf "$WORK/sd/llama_cpp_python-$VERSION.tar.gz" -C "$WORK"
fi
SRC=$WORK/llama_cpp_python-$VERSION/vendor/llama.cpp
# Shared libraries so that the Python binding loads the very build the tools use.
cmake -S "$SRC" -B "$WORK/build" -DCMAKE_BUILD_TYPE=Release \
  -DBUILD_SHARED_LIBS=ON -DGGML_NATIVE=ON \
  -DLLAMA_BUILD_COMMON=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_BORINGSSL=OFF -DLLAMA_LLGUIDANCE=OFF \
  -DLLAMA_BUILD_WEBUI=OFF -DLLAMA_USE_PREBUILT_WEBUI=OFF \
  -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF > "$WORK/cmake.log"
cmake --build "$WORK/build" --target llama llama-server llama-bench llama-batched-bench llama-tokenize llama-quantize -j"$(nproc)"
# The binding without its own copy of the library: LLAMA_CPP_LIB_PATH points it at ours.
CMAKE_ARGS="-DLLAMA_BUILD=OFF -DLLAVA_BUILD=OFF" "$VENV/bin/pip" install -q \
  "$WORK/sd/llama_cpp_python-$VERSION.tar.gz" numpy
echo "llama.cpp $VERSION built in $WORK/build/bin"
echo "use: LLAMA_CPP_LIB_PATH=$WORK/build/bin $VENV/bin/python ..."
