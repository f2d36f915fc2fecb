#!/usr/bin/env python3
"""The llama.cpp reference outputs of the architecture fidelity tests (family_fidelity_test.cpp).

Run once (not in CI) after bench/build_llama_cpp.sh and scripts/setup.sh (which makes the test
models with scripts/make_test_models.py):
  LLAMA_CPP_LIB_PATH=~/.cache/mnemo/llama.cpp/build/bin \\
    ~/.cache/mnemo/llama.cpp/venv/bin/python scripts/gen_family_fixtures.py [FAMILY...]

For every test model (tests/fixtures/families/<model>.json):
  - checks that llama-quantize itself, run on the family's F32 model with
    `--pure --token-embedding-type q8_0 --output-tensor-type q8_0`, gives every tensor the same
    type and bytes as the test model (so the files are what llama-quantize makes);
  - runs llama.cpp (llama-cpp-python, pinned in bench/build_llama_cpp.sh) on the very file, whose
    SHA-256 the fixture records: top-1 token, margin and top-8 logits at every position of a
    teacher-forced text, and greedy continuations, in llama.cpp's canonical configuration (F32
    KV cache, flash attention off, 2 threads);
  - measures llama.cpp against itself on the same text with flash attention on and an F16 cache:
    its own top-1 agreement, mean |logit difference| over the top 8 and largest move of a top-8
    gap. The test holds Mnemo to that band.
"""
import hashlib
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
from llama_cpp import Llama
import llama_cpp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import make_test_models  # noqa: E402

CACHE = os.environ.get("MNEMO_CACHE", os.path.expanduser("~/.cache/mnemo"))
MODELS = os.path.join(CACHE, "test-models")
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "families")
LLAMA_BIN = os.environ.get("LLAMA_CPP_LIB_PATH", os.path.join(CACHE, "llama.cpp", "build", "bin"))
TEACHER_FORCED_TOKENS = 384
GREEDY_TOKENS = 32
GREEDY_PROMPTS = ["The capital of France is", "def quicksort(arr):\n", "Once upon a time, in a small village,",
                  "1, 2, 3, 4, 5,"]


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def teacher_forced_text():
    with open(os.path.join(ROOT, "data", "sharegpt_en.jsonl")) as f:
        parts = []
        for line in f:
            for turn in json.loads(line)["conversations"]:
                parts.append(turn["value"])
            if sum(len(p) for p in parts) > 6000:
                break
    return "\n\n".join(parts)


def check_llama_quantize(gguf, base, ours, qtype):
    """Every tensor of llama-quantize's output equals ours (type and bytes)."""
    with tempfile.TemporaryDirectory() as tmp:
        theirs = os.path.join(tmp, "q.gguf")
        target = {"Q3_K": "Q3_K_M", "MXFP4": "MXFP4_MOE"}.get(qtype, qtype)
        subprocess.run([os.path.join(LLAMA_BIN, "llama-quantize"), "--pure", "--token-embedding-type", "q8_0",
                        "--output-tensor-type", "q8_0", base, theirs, target], check=True, capture_output=True)
        a = {t.name: t for t in gguf.GGUFReader(ours).tensors}
        b = {t.name: t for t in gguf.GGUFReader(theirs).tensors}
        if a.keys() != b.keys():
            raise SystemExit(f"{ours}: llama-quantize wrote other tensors: {sorted(a.keys() ^ b.keys())}")
        for name in a:
            if a[name].tensor_type != b[name].tensor_type or bytes(a[name].data) != bytes(b[name].data):
                raise SystemExit(f"{ours}: tensor {name} differs from llama-quantize's "
                                 f"({a[name].tensor_type.name} against {b[name].tensor_type.name})")


def logits_of(llm, tokens):
    llm.reset()
    llm.eval(tokens)
    return np.array(llm.scores[:len(tokens)])


def self_noise(canonical, other):
    """llama.cpp against itself: agreement and logit movement between two configurations."""
    top1_a, top1_b = canonical.argmax(axis=1), other.argmax(axis=1)
    top8 = np.argsort(-canonical, axis=1)[:, :8]
    a8 = np.take_along_axis(canonical, top8, axis=1)
    b8 = np.take_along_axis(other, top8, axis=1)
    gaps = (b8[:, :1] - b8) - (a8[:, :1] - a8)
    return {"top1_agreement": float(np.mean(top1_a == top1_b)), "mean_top8_diff": float(np.mean(np.abs(a8 - b8))),
            "max_gap_move": float(np.max(np.abs(gaps)))}


def fixture_for(path, n_ctx):
    common = dict(model_path=path, n_ctx=n_ctx, n_batch=512, n_threads=2, logits_all=True, verbose=False)
    llm = Llama(**common, flash_attn=False, type_k=0, type_v=0)
    tokens = llm.tokenize(teacher_forced_text().encode(), add_bos=True, special=False)[:TEACHER_FORCED_TOKENS]
    scores = logits_of(llm, tokens)
    part = np.partition(scores, -2, axis=1)
    top8 = np.argsort(-scores, axis=1)[:, :8]
    fixture = {
        "model_sha256": sha256(path), "llama_cpp_python": llama_cpp.__version__, "n_threads": 2, "n_ctx": n_ctx,
        "flash_attn": False, "kv_type": "f32", "tokens": tokens, "top1": [int(i) for i in scores.argmax(axis=1)],
        "margins": [round(float(m), 5) for m in part[:, -1] - part[:, -2]], "top8": top8.tolist(),
        "top8_logits": np.round(np.take_along_axis(scores, top8, axis=1), 5).tolist(),
    }
    greedy = []
    for prompt in GREEDY_PROMPTS:
        prompt_tokens = llm.tokenize(prompt.encode(), add_bos=True, special=True)
        llm.reset()
        llm.eval(prompt_tokens)
        out, top4, top4_logits = [], [], []
        for _ in range(GREEDY_TOKENS):
            logits = np.array(llm.scores[llm.n_tokens - 1])
            best = np.argsort(-logits)[:4]
            out.append(int(best[0]))
            top4.append([int(t) for t in best])
            top4_logits.append([round(float(logits[t]), 5) for t in best])
            llm.eval([int(best[0])])
        greedy.append({"prompt": prompt, "prompt_tokens": prompt_tokens, "generated": out, "top4": top4,
                       "top4_logits": top4_logits})
    fixture["greedy"] = greedy
    del llm
    other = Llama(**common, flash_attn=True, type_k=1, type_v=1)
    fixture["llama_cpp_self"] = {"configuration": "flash attention on, F16 KV cache",
                                 **self_noise(scores, logits_of(other, tokens))}
    return fixture


def main():
    families = sys.argv[1:] or list(make_test_models.FAMILIES)
    src = os.path.join(CACHE, "llama-cpp-python-0.3.36", "vendor", "llama.cpp")  # scripts/setup.sh keeps it
    sys.path.insert(0, os.path.join(src, "gguf-py"))
    import gguf  # noqa: E402
    os.makedirs(FIXTURES, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "make_test_models.py"), "--gguf-py",
                        os.path.join(src, "gguf-py"), "--ggml-lib", os.path.join(CACHE, "ggml-base", "libggml-base.so"),
                        "--llama-cpp", src, "--out", tmp, "--base", "--only", *families], check=True)
        for file_name, family, qtype in make_test_models.model_files():
            if family not in families:
                continue
            ours = os.path.join(MODELS, file_name)
            if sha256(ours) != sha256(os.path.join(tmp, file_name)):
                raise SystemExit(f"{ours} is not what make_test_models.py makes now: run scripts/setup.sh")
            check_llama_quantize(gguf, os.path.join(tmp, f"{family}-f32.gguf"), ours, qtype)
            n_ctx = 8192 if family == "phi3" else 2048
            fixture = fixture_for(ours, n_ctx)
            fixture["llama_quantize_identical"] = True
            out = os.path.join(FIXTURES, file_name.replace(".gguf", ".json"))
            with open(out, "w") as f:
                json.dump(fixture, f)
            s = fixture["llama_cpp_self"]
            print(f"{file_name}: llama.cpp against itself top-1 {s['top1_agreement']:.3f}, mean |diff| "
                  f"{s['mean_top8_diff']:.3f}, largest gap move {s['max_gap_move']:.3f}")


if __name__ == "__main__":
    main()
