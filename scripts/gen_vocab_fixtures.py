#!/usr/bin/env python3
"""llama.cpp's tokenizations of its tokenizer test corpus, with more multilingual and code cases,
for the two vocabularies scripts/make_vocabs.py makes (tekken, gpt-4o): the .inp/.out files of
tests/tokenizer/llama_vocab_test.cpp, in llama.cpp's own format (add_special and parse_special
off, as tests/test-tokenizer-0 runs).

Run once (not in CI) after bench/build_llama_cpp.sh and scripts/setup.sh:
  LLAMA_CPP_LIB_PATH=~/.cache/mnemo/llama.cpp/build/bin \\
    ~/.cache/mnemo/llama.cpp/venv/bin/python scripts/gen_vocab_fixtures.py
"""
import os

from llama_cpp import Llama

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CACHE = os.environ.get("MNEMO_CACHE", os.path.expanduser("~/.cache/mnemo"))
VOCABS = os.path.join(CACHE, "llama-vocab")
OUT = os.path.join(ROOT, "tests", "fixtures", "vocabs")
SEPARATOR = "\n__ggml_vocab_test__\n"
MORE = [
    "Mistral's tekken splits CamelCaseWords and HTTPServer differently from lowercase words.",
    "ÉCOLE École école ÀÉÎÕÜ àéîõü ß ẞ Ǆ ǅ ǆ",
    "Привет, мир! Как дела? ПРИВЕТ привет",
    "Γειά σου Κόσμε, ΚΑΛΗΜΕΡΑ",
    "مرحبا بالعالم 123 ٤٥٦",
    "नमस्ते दुनिया, क्या हाल है?",
    "こんにちは世界。カタカナとひらがな、漢字。",
    "안녕하세요 세계",
    "emoji 🦙🚀👍🏽 flags 🇫🇷 zwj 👨‍👩‍👧",
    "x = a/b//c /path/to/file.py\r\n\r\nnext line\n\n\nthree",
    "numbers 1 12 123 1234 12345 3.14159 1,000,000 ١٢٣",
    "I'm, you're, they've, we'll, he'd, it's, I'M, YOU'RE, DON'T",
    "\u00a0non-breaking\u2009thin\u3000ideographic spaces\u2028line sep",
    "<|endoftext|> [INST] <s> are text here: specials are not parsed",
    "def fib(n):\n\treturn n if n < 2 else fib(n - 1) + fib(n - 2)  # tabs\n",
]


def main():
    with open(os.path.join(VOCABS, "ggml-vocab-qwen2.gguf.inp")) as f:
        corpus = f.read().split(SEPARATOR)
    corpus += MORE
    os.makedirs(OUT, exist_ok=True)
    for name in ("tekken", "gpt-4o"):
        llm = Llama(model_path=os.path.join(VOCABS, f"ggml-vocab-{name}.gguf"), vocab_only=True, verbose=False)
        lines = []
        for text in corpus:
            tokens = llm.tokenize(text.encode(), add_bos=False, special=False)
            lines.append("".join(f" {t}" for t in tokens))
        base = os.path.join(OUT, f"ggml-vocab-{name}.gguf")
        with open(base + ".inp", "w") as f:
            f.write(SEPARATOR.join(corpus))
        with open(base + ".out", "w") as f:
            f.write("\n".join(lines) + "\n")
        print(f"{name}: {len(corpus)} cases")


if __name__ == "__main__":
    main()
