#!/usr/bin/env python3
"""Writes an F16 GGUF in the full shapes of a published checkpoint, random weights, for speed
measurements where the real file is not on PyPI (issue 41: "a Qwen3 shape of about 1.7B
parameters"). Quantise it with llama.cpp's own llama-quantize to the mixes users download
(Q4_K_M, Q3_K_M, ...), so that Mnemo and llama.cpp time the same bytes:

  make_bench_model.py --gguf-py DIR --llama-cpp DIR --out qwen3-1.7b-f16.gguf [--shape qwen3-1.7b]
  llama-quantize qwen3-1.7b-f16.gguf qwen3-1.7b-q4_k_m.gguf Q4_K_M

The tokenizer is the family's full vocabulary (llama.cpp's test vocabulary of the sdist), so the
output product has the real width. The weights are a seeded normal draw: speed does not depend on
them, and a 1.7B model does not fit the integer generator of scripts/make_test_models.py in a
reasonable time.
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
import make_test_models  # noqa: E402 (its vocabulary writer)

SHAPES = {
    # Qwen3-1.7B (config.json of Qwen/Qwen3-1.7B): 28 layers, 2,048 wide, 16 query heads and 8 KV
    # heads of 128, FFN 6,144, QK-norm, tied embedding, vocabulary 151,936.
    "qwen3-1.7b": dict(arch="qwen3", layers=28, embd=2048, heads=16, kv_heads=8, head=128, ff=6144,
                       qk_norm=True, vocab="qwen2", template="Qwen-Qwen3-0.6B.jinja", n_vocab=151936,
                       meta={"rope.freq_base": 1e6, "attention.layer_norm_rms_epsilon": 1e-6,
                             "context_length": 40960}),
}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gguf-py", required=True)
    parser.add_argument("--llama-cpp", required=True, help="the sdist's vendor/llama.cpp (vocabulary, template)")
    parser.add_argument("--out", required=True)
    parser.add_argument("--shape", default="qwen3-1.7b", choices=sorted(SHAPES))
    args = parser.parse_args()
    sys.path.insert(0, args.gguf_py)
    import gguf  # noqa: E402 (the sdist's)

    spec = SHAPES[args.shape]
    reader = gguf.GGUFReader(os.path.join(args.llama_cpp, "models", f"ggml-vocab-{spec['vocab']}.gguf"))
    field = lambda k: reader.fields[k].contents() if k in reader.fields else None  # noqa: E731
    tokens = list(field("tokenizer.ggml.tokens"))
    types = [int(t) for t in field("tokenizer.ggml.token_type")]
    # Pad to the checkpoint's embedding rows, as its converter does.
    while len(tokens) < spec["n_vocab"]:
        tokens.append(f"[PAD{len(tokens)}]")
        types.append(int(gguf.TokenType.UNUSED))
    with open(os.path.join(args.llama_cpp, "models", "templates", spec["template"])) as f:
        template = f.read()

    arch = spec["arch"]
    writer = gguf.GGUFWriter(args.out + ".tmp", arch)
    writer.add_name(f"mnemo-bench-{args.shape} (random weights)")
    p = arch + "."
    for key, value in [("block_count", spec["layers"]), ("embedding_length", spec["embd"]),
                       ("feed_forward_length", spec["ff"]), ("attention.head_count", spec["heads"]),
                       ("attention.head_count_kv", spec["kv_heads"]), ("attention.key_length", spec["head"]),
                       ("attention.value_length", spec["head"]), ("rope.dimension_count", spec["head"])]:
        writer.add_uint32(p + key, value)
    for key, value in spec["meta"].items():
        (writer.add_float32 if isinstance(value, float) else writer.add_uint32)(p + key, value)
    writer.add_file_type(int(gguf.LlamaFileType.MOSTLY_F16))
    vocab = {
        "model": field("tokenizer.ggml.model"), "pre": field("tokenizer.ggml.pre"), "tokens": tokens, "types": types,
        "scores": None, "merges": list(field("tokenizer.ggml.merges")),
        "ids": {k: int(field(k)) for k in reader.fields if k.startswith("tokenizer.ggml.") and k.endswith("_token_id")},
        "flags": {k: bool(field(k)) for k in reader.fields if k.startswith("tokenizer.ggml.add_")},
    }
    make_test_models.add_vocabulary(writer, vocab, template)

    rng = np.random.default_rng(41)
    e, h, kv, d, ff = spec["embd"], spec["heads"], spec["kv_heads"], spec["head"], spec["ff"]

    def matrix(name, cols, rows, std):
        values = rng.standard_normal((rows, cols), dtype=np.float32)
        values *= std
        writer.add_tensor(name, values.astype(np.float16))

    def vector(name, n):
        writer.add_tensor(name, (1.0 + 0.1 * rng.standard_normal(n, dtype=np.float32)).astype(np.float32))

    matrix("token_embd.weight", e, spec["n_vocab"], 0.5)
    vector("output_norm.weight", e)
    for il in range(spec["layers"]):
        b = f"blk.{il}."
        vector(b + "attn_norm.weight", e)
        matrix(b + "attn_q.weight", e, h * d, e ** -0.5)
        matrix(b + "attn_k.weight", e, kv * d, e ** -0.5)
        matrix(b + "attn_v.weight", e, kv * d, e ** -0.5)
        if spec.get("qk_norm"):
            vector(b + "attn_q_norm.weight", d)
            vector(b + "attn_k_norm.weight", d)
        matrix(b + "attn_output.weight", h * d, e, (h * d) ** -0.5)
        vector(b + "ffn_norm.weight", e)
        matrix(b + "ffn_gate.weight", e, ff, e ** -0.5)
        matrix(b + "ffn_up.weight", e, ff, e ** -0.5)
        matrix(b + "ffn_down.weight", ff, e, ff ** -0.5)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.replace(args.out + ".tmp", args.out)
    print(f"make_bench_model: {args.out}")


if __name__ == "__main__":
    main()
