#!/usr/bin/env python3
"""Generates the llama.cpp reference fixtures the fidelity tests compare against.

Run once (not in CI) after bench/build_llama_cpp.sh:
  LLAMA_CPP_LIB_PATH=~/.cache/mnemo/llama.cpp/build/bin \
    ~/.cache/mnemo/llama.cpp/venv/bin/python scripts/gen_llama_fixtures.py [gemma3|smollm2] [MODEL]

For Gemma 3 270M, writes tests/fixtures/gemma3_tokenize.json (tokenizer cases); for both models,
<family>_greedy.json (greedy continuations) and <family>_teacher_forced.json (top-1 token at
every position of a 512-token text), all computed by llama.cpp (llama-cpp-python, pinned in
bench/build_llama_cpp.sh) on the very same GGUF file, whose SHA-256 is recorded in each
fixture, with an F32 KV cache.
"""
import hashlib
import json
import os
import sys

import numpy as np
from llama_cpp import Llama
import llama_cpp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures")
MODELS = os.path.join(os.environ.get("MNEMO_CACHE", os.path.expanduser("~/.cache/mnemo")), "models")
MODEL_FILES = {"gemma3": "gemma-3-270m-q4_k_m.gguf", "smollm2": "SmolLM2-135M-Instruct.Q4_1.gguf",
               "qwen2coder": "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"}

TOKENIZER_CORPUS = [
    "Hello world",
    " Hello World!",
    "The quick brown fox jumps over the lazy dog.",
    "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n",
    "for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }",
    "   leading spaces, trailing spaces   ",
    "tabs\tand\t\tnewlines\n\n\nand   runs      of spaces",
    "Emoji: 🦙🚀👍🏽 and flags 🇫🇷🇯🇵",
    "中文测试：你好，世界！今天天气很好。",
    "日本語のテキストとカタカナ、ひらがな。",
    "한국어 문장도 있습니다.",
    "Ελληνικά και русский текст, and Arabic: مرحبا بالعالم",
    "नमस्ते दुनिया",
    "Numbers 1234567890 and 3.14159 and 1,000,000",
    "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n",
    "Mixed <b>HTML</b> &amp; `code` and **markdown**\n- item 1\n- item 2",
    "Ünïcödé àccénts: café, naïve, résumé, Äpfel",
    "",
    " ",
    "\n",
    "a" * 100,
    "URL: https://example.com/path?query=1&other=two#frag",
]

GREEDY_PROMPTS = [
    "The capital of France is",
    "Once upon a time, in a small village,",
    "def quicksort(arr):\n",
    "<start_of_turn>user\nWrite a haiku about the sea.<end_of_turn>\n<start_of_turn>model\n",
    "<start_of_turn>user\nExplain what a KV cache is in one paragraph.<end_of_turn>\n<start_of_turn>model\n",
    "Les trois couleurs du drapeau français sont",
    "中国的首都是",
    "The list of prime numbers: 2, 3, 5, 7,",
    "<start_of_turn>user\n日本の首都はどこですか？<end_of_turn>\n<start_of_turn>model\n",
    "In 1969, the Apollo 11 mission",
]
# SmolLM2-135M-Instruct: plain text and ChatML turns (with and without a system message).
SMOLLM2_GREEDY_PROMPTS = [
    "The capital of France is",
    "Once upon a time, in a small village,",
    "def quicksort(arr):\n",
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nWhat is the capital of France?"
    "<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nWrite a haiku about the sea."
    "<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>user\nExplain what a KV cache is in one paragraph.<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
    "The list of prime numbers: 2, 3, 5, 7,",
    "In 1969, the Apollo 11 mission",
]
# Qwen2.5-Coder-0.5B-Instruct: plain text, ChatML turns (its template's default system message and
# another) and code to complete.
QWEN_CODER_GREEDY_PROMPTS = [
    "The capital of France is",
    "Once upon a time, in a small village,",
    "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nWrite a Python function that "
    "reverses a string.<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>user\nExplain what a KV cache is in one paragraph.<|im_end|>\n<|im_start|>assistant\n",
    "def quicksort(arr):\n",
    "#include <stdio.h>\n\nint main(void) {\n",
    "// Returns the n-th Fibonacci number.\nfunction fib(n) {\n",
    "SELECT name, COUNT(*) FROM orders\n",
]
GREEDY_TOKENS = 48
TEACHER_FORCED_TOKENS = 512


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
            conv = json.loads(line)
            for turn in conv["conversations"]:
                parts.append(turn["value"])
            if sum(len(p) for p in parts) > 6000:
                break
    return "\n\n".join(parts)


def main():
    family = sys.argv[1] if len(sys.argv) > 1 else "gemma3"
    if family not in MODEL_FILES:
        sys.exit(f"unknown model family {family!r} ({', '.join(MODEL_FILES)})")
    model = sys.argv[2] if len(sys.argv) > 2 else os.path.join(MODELS, MODEL_FILES[family])
    # The canonical configuration: F32 KV cache and flash attention off. llama.cpp then computes
    # attention in F32 throughout, and its outputs do not depend on how it batches the work
    # (with an F16 cache or flash attention, its own logits move by up to ~3 between batch sizes
    # on this model, and its top-1 tokens disagree with themselves at ~5% of positions).
    digest = sha256(model)
    llm = Llama(model_path=model, n_ctx=2048, n_batch=512, n_threads=2, logits_all=True, verbose=False,
                flash_attn=False, type_k=0, type_v=0)
    meta = {"model_sha256": digest, "llama_cpp_python": llama_cpp.__version__, "n_threads": 2,
            "flash_attn": False, "kv_type": "f32"}

    if family == "gemma3":
        write_tokenizer_cases(llm, meta)
    prompts = {"gemma3": GREEDY_PROMPTS, "smollm2": SMOLLM2_GREEDY_PROMPTS, "qwen2coder": QWEN_CODER_GREEDY_PROMPTS}
    write_greedy(llm, meta, family, prompts[family])
    write_teacher_forced(llm, meta, family)
    print("fixtures written to", FIXTURES)


def write_tokenizer_cases(llm, meta):
    cases = []
    for text in TOKENIZER_CORPUS:
        for add_special in (True, False):
            for parse_special in (True, False):
                tokens = llm.tokenize(text.encode(), add_bos=add_special, special=parse_special)
                detok = llm.detokenize(tokens).decode("utf-8", errors="replace")
                cases.append({"text": text, "add_special": add_special, "parse_special": parse_special,
                              "tokens": tokens, "detokenized": detok})
    with open(os.path.join(FIXTURES, "gemma3_tokenize.json"), "w") as f:
        json.dump({**meta, "cases": cases}, f, ensure_ascii=False, indent=1)



def write_greedy(llm, meta, family, prompts):
    greedy = []
    for prompt in prompts:
        tokens = llm.tokenize(prompt.encode(), add_bos=True, special=True)
        llm.reset()
        llm.eval(tokens)
        out, top4, top4_logits = [], [], []
        for _ in range(GREEDY_TOKENS):
            logits = np.array(llm.scores[llm.n_tokens - 1])
            best = np.argsort(-logits)[:4]
            out.append(int(best[0]))
            top4.append([int(t) for t in best])
            top4_logits.append([round(float(logits[t]), 5) for t in best])
            llm.eval([int(best[0])])
        # The leading candidates of every step let a test tell a real divergence from a near-tie
        # that numerical noise may resolve either way.
        greedy.append({"prompt": prompt, "prompt_tokens": tokens, "generated": out, "top4": top4,
                       "top4_logits": top4_logits, "text": llm.detokenize(out).decode("utf-8", errors="replace")})
    with open(os.path.join(FIXTURES, f"{family}_greedy.json"), "w") as f:
        json.dump({**meta, "cases": greedy}, f, ensure_ascii=False, indent=1)


def write_teacher_forced(llm, meta, family):
    text_tokens = llm.tokenize(teacher_forced_text().encode(), add_bos=True, special=False)[:TEACHER_FORCED_TOKENS]
    llm.reset()
    llm.eval(text_tokens)
    scores = np.array(llm.scores[:len(text_tokens)])
    top1 = [int(i) for i in np.argmax(scores, axis=1)]
    # The margin between the best two logits tells a test which positions are near-ties; the
    # top-8 logits let it measure how far its logits are from llama.cpp's.
    part = np.partition(scores, -2, axis=1)
    margins = [float(m) for m in (part[:, -1] - part[:, -2])]
    top8 = np.argsort(-scores, axis=1)[:, :8]
    top8_logits = np.take_along_axis(scores, top8, axis=1)
    with open(os.path.join(FIXTURES, f"{family}_teacher_forced.json"), "w") as f:
        json.dump({**meta, "tokens": text_tokens, "top1": top1, "margins": margins,
                   "top8": top8.tolist(), "top8_logits": np.round(top8_logits, 5).tolist()}, f)


if __name__ == "__main__":
    main()
