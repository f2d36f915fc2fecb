#!/usr/bin/env python3
"""Makes the GGUF files of the architecture fidelity tests (tests/model/family_fidelity_test.cpp).

For each architecture a model in that family's real shapes (head size, query/key-value head
ratio, partial rotary, tied embeddings, FFN ratio, biases, norms, multipliers and RoPE
scaling of a published checkpoint, with fewer layers and a narrower residual stream), random
weights, and a real tokenizer of the family cut to its first 4,096 tokens plus its special
ones (so that chat templates still find their tokens). Each is written in a baseline type and
in each quantisation type of the issue (Q2_K, Q3_K, IQ4_NL, IQ4_XS, MXFP4).

Everything comes from the llama.cpp of the pinned llama-cpp-python sdist:
  - written with its gguf-py (--gguf-py, the sdist's gguf-py directory);
  - quantised with its own quantisers: ggml_quantize_chunk of its libggml-base (--ggml-lib), the
    function llama-quantize calls, in the mix of `llama-quantize --pure --token-embedding-type
    q8_0 --output-tensor-type q8_0 IN OUT TYPE` (every 2-D weight in TYPE, falling back as
    llama-quantize does where a row is no multiple of the type's block); 1-D tensors stay F32.
    scripts/gen_family_fixtures.py checks that llama-quantize itself gives the same bytes.
  - the tokenizers are its test vocabularies (models/ggml-vocab-*.gguf), the chat templates its
    copies of the families' templates (models/templates/).
The weights come from a counter-based generator in integer arithmetic (no library RNG, no
transcendental functions), so the files are the same bytes on every machine: the fixtures
record their SHA-256 and the tests refuse a file that differs.

  make_test_models.py --gguf-py DIR --ggml-lib LIB --llama-cpp DIR --out DIR [--only NAME...]
"""
import argparse
import ctypes
import hashlib
import json
import os
import sys

import numpy as np

BASELINE = "Q8_0"
QUANT_TYPES = ["Q2_K", "Q3_K", "IQ4_NL", "IQ4_XS", "MXFP4"]
VOCAB_REGULAR_TOKENS = 4096

# Per family: the shapes of a published checkpoint scaled down (the checkpoint in `like`), the
# vocabulary and template, and the family's metadata. Keys under `meta` are written with the
# architecture's prefix.
FAMILIES = {
    # Qwen2.5-0.5B: 896 wide = 14 heads of 64 over 2 KV heads, FFN 4864, Q/K/V biases, tied. At
    # half the width the rows (448, 2432) are no multiple of 256, as the real 896 is not: the
    # K and IQ4_XS types fall back as llama-quantize falls back on the real model.
    "qwen2": dict(like="Qwen2.5-0.5B", arch="qwen2", layers=2, embd=448, heads=7, kv_heads=1, head=64, ff=2432,
                  tied=True, qkv_bias=True, vocab="qwen2", template="Qwen-Qwen2.5-7B-Instruct.jinja",
                  meta={"rope.freq_base": 1e6, "attention.layer_norm_rms_epsilon": 1e-6, "context_length": 32768}),
    # Qwen3-1.7B: heads of 128 (16 query, 8 KV: queries wider than the stream), QK-norm, tied.
    "qwen3": dict(like="Qwen3-1.7B", arch="qwen3", layers=2, embd=512, heads=8, kv_heads=4, head=128, ff=1536,
                  tied=True, qk_norm=True, vocab="qwen2", template="Qwen-Qwen3-0.6B.jinja",
                  meta={"rope.freq_base": 1e6, "attention.layer_norm_rms_epsilon": 1e-6, "context_length": 40960}),
    # Phi-4-mini: 24 heads of 128 over 8 KV heads, fused QKV and gate/up, 3/4 of each head
    # rotated, LongRoPE from 4,096 to 131,072 positions (the long factors apply: the context
    # served is the model's), attention factor sqrt(1 + ln 32 / ln 4096), tied.
    "phi3": dict(like="Phi-4-mini", arch="phi3", layers=2, embd=768, heads=6, kv_heads=2, head=128, ff=2048,
                 tied=True, fused=True, rope_dims=96, longrope=True, vocab="phi-3",
                 template="microsoft-Phi-3.5-mini-instruct.jinja",
                 meta={"rope.freq_base": 10000.0, "attention.layer_norm_rms_epsilon": 1e-5, "context_length": 131072,
                       "rope.scaling.original_context_length": 4096, "rope.scaling.attn_factor": 1.190238}),
    # SmolLM3-3B: 16 heads of 128 over 4 KV heads, no RoPE in every fourth layer (four layers
    # here, so the last has none), the Llama 3 tokenizer, tied.
    "smollm3": dict(like="SmolLM3-3B", arch="smollm3", layers=4, embd=512, heads=4, kv_heads=1, head=128, ff=2816,
                    tied=True, vocab="llama-bpe", template="HuggingFaceTB-SmolLM3-3B.jinja",
                    meta={"rope.freq_base": 5e6, "attention.layer_norm_rms_epsilon": 1e-6, "context_length": 65536}),
    # Granite 3.3 2B: 32 heads of 64 over 8 KV heads and its four multipliers, tied (the
    # embedding larger, as its logits are divided by 8, and the blocks' outputs larger against its
    # embedding multiplier of 12 and residual multiplier of 0.22).
    "granite": dict(like="granite-3.3-2b", arch="granite", layers=2, embd=512, heads=8, kv_heads=2, head=64, ff=2048,
                    tied=True, embd_std=2.0, out_gain=2400.0, vocab="refact", template="ibm-granite-granite-3.3-2B-Instruct.jinja",
                    meta={"rope.freq_base": 10000.0, "attention.layer_norm_rms_epsilon": 1e-5, "context_length": 131072,
                          "logit_scale": 8.0, "residual_scale": 0.22, "embedding_scale": 12.0,
                          "attention.scale": 0.015625}),
    # Ministral 3 3B: 32 heads of 128 over 8 KV heads, YaRN x16 with beta 32/1 and log
    # multiplier 1, and the query temperature 0.1; the original context is scaled down with the
    # model (128 positions) so that the teacher-forced text crosses its temperature steps.
    "mistral3": dict(like="Ministral-3-3B", arch="mistral3", layers=2, embd=512, heads=8, kv_heads=2, head=128, ff=1536,
                     tied=True, vocab="llama-spm", template="mistralai-Ministral-3-14B-Reasoning-2512.jinja",
                     meta={"rope.freq_base": 1e6, "attention.layer_norm_rms_epsilon": 1e-5, "context_length": 2048,
                           "rope.scaling.type": "yarn", "rope.scaling.factor": 16.0,
                           "rope.scaling.original_context_length": 128, "rope.scaling.yarn_beta_fast": 32.0,
                           "rope.scaling.yarn_beta_slow": 1.0, "rope.scaling.yarn_log_multiplier": 1.0,
                           "attention.temperature_scale": 0.1}),
}


# ---- deterministic values: splitmix64 of (seed, index), uniform in [0, 1) from its top 53 bits

def _splitmix(x):
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def uniform(seed, n):
    with np.errstate(over="ignore"):
        counter = np.arange(n, dtype=np.uint64) + np.uint64(seed) * np.uint64(0x100000000)
        bits = _splitmix(counter)
    return (bits >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


def bell(seed, n, std):
    """Approximately normal: the sum of four uniforms, centred and scaled (exact in float64)."""
    total = uniform(4 * seed, n) + uniform(4 * seed + 1, n) + uniform(4 * seed + 2, n) + uniform(4 * seed + 3, n)
    return ((total - 2.0) * (std * np.sqrt(3.0))).astype(np.float32)


def name_seed(name):
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:3], "little")


# ---- llama.cpp's quantisers through libggml-base

class Quantizer:
    def __init__(self, lib_path, gguf):
        self.lib = ctypes.CDLL(lib_path)
        self.lib.ggml_quantize_chunk.restype = ctypes.c_size_t
        self.lib.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                                 ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
        self.lib.ggml_row_size.restype = ctypes.c_size_t
        self.lib.ggml_row_size.argtypes = [ctypes.c_int, ctypes.c_int64]
        self.lib.ggml_blck_size.restype = ctypes.c_int64
        self.lib.ggml_blck_size.argtypes = [ctypes.c_int]
        self.gguf = gguf

    def block(self, qtype):
        return int(self.lib.ggml_blck_size(int(qtype)))

    def quantize(self, values, qtype):
        rows, cols = values.shape
        src = np.ascontiguousarray(values, dtype=np.float32)
        row_bytes = int(self.lib.ggml_row_size(int(qtype), cols))
        out = np.zeros((rows, row_bytes), dtype=np.uint8)
        written = self.lib.ggml_quantize_chunk(int(qtype), src.ctypes.data, out.ctypes.data, 0, rows, cols, None)
        if written != rows * row_bytes:
            raise RuntimeError(f"ggml_quantize_chunk wrote {written} bytes, expected {rows * row_bytes}")
        return out


# llama-quantize's fallback for rows that are no multiple of the type's block (llama-quant.cpp,
# tensor_type_fallback).
FALLBACK = {"Q2_K": "Q4_0", "Q3_K": "Q4_0", "Q4_K": "Q5_0", "Q5_K": "Q5_1", "Q6_K": "Q8_0", "IQ4_XS": "IQ4_NL"}


def tensor_type(quantizer, gguf, name, cols, target):
    """The type llama-quantize --pure --token-embedding-type q8_0 --output-tensor-type q8_0 gives."""
    if name in ("token_embd.weight", "output.weight"):
        target = "Q8_0"
    qtype = gguf.GGMLQuantizationType[target]
    if cols % quantizer.block(qtype) != 0:
        fallback = FALLBACK.get(target, target)
        qtype = gguf.GGMLQuantizationType[fallback]
        if cols % quantizer.block(qtype) != 0:
            qtype = gguf.GGMLQuantizationType.F16
    return qtype


# ---- the tokenizer: a real vocabulary cut to its first tokens and its special ones

def cut_vocabulary(gguf, path):
    reader = gguf.GGUFReader(path)
    field = lambda k: reader.fields[k].contents() if k in reader.fields else None  # noqa: E731
    tokens = field("tokenizer.ggml.tokens")
    types = field("tokenizer.ggml.token_type")
    scores = field("tokenizer.ggml.scores")
    merges = field("tokenizer.ggml.merges")
    keep = [i for i in range(len(tokens)) if i < VOCAB_REGULAR_TOKENS or types[i] in (2, 3, 4)]
    new_id = {old: new for new, old in enumerate(keep)}
    vocab = {
        "model": field("tokenizer.ggml.model"),
        "pre": field("tokenizer.ggml.pre"),
        "tokens": [tokens[i] for i in keep],
        "types": [int(types[i]) for i in keep],
        "scores": [float(scores[i]) for i in keep] if scores is not None else None,
        "ids": {},
        "flags": {},
    }
    for key in reader.fields:
        if key.startswith("tokenizer.ggml.") and key.endswith("_token_id"):
            old = int(field(key))
            if old in new_id:
                vocab["ids"][key] = new_id[old]
        elif key.startswith("tokenizer.ggml.add_"):
            vocab["flags"][key] = bool(field(key))
    if merges is not None:
        kept = set(vocab["tokens"])
        vocab["merges"] = [m for m in merges if all(p in kept for p in m.split(" ", 1)) and m.replace(" ", "", 1) in kept]
    return vocab


def add_vocabulary(writer, vocab, template):
    writer.add_tokenizer_model(vocab["model"])
    writer.add_tokenizer_pre(vocab["pre"])
    writer.add_token_list(vocab["tokens"])
    writer.add_token_types(vocab["types"])
    if vocab["scores"] is not None:
        writer.add_token_scores(vocab["scores"])
    if vocab.get("merges") is not None:
        writer.add_token_merges(vocab["merges"])
    for key, value in vocab["ids"].items():
        writer.add_uint32(key, value)
    for key, value in vocab["flags"].items():
        writer.add_bool(key, value)
    writer.add_chat_template(template)


# ---- the model

def family_tensors(spec, n_vocab):
    """(name, float32 array) of every tensor, in the order llama.cpp's converters write them."""
    e, h, kv, d, ff = spec["embd"], spec["heads"], spec["kv_heads"], spec["head"], spec["ff"]
    q_dim, kv_dim = h * d, kv * d
    tensors = []

    def matrix(name, cols, rows, std):
        tensors.append((name, bell(name_seed(name), rows * cols, std).reshape(rows, cols)))

    def vector(name, n, center, spread):
        tensors.append((name, (center + (uniform(name_seed(name), n) - 0.5) * 2 * spread).astype(np.float32)))

    # The embedding's scale makes the tied output's logits spread over a few units, so that
    # most positions have a clear best token (random weights would otherwise tie everywhere); the
    # blocks' output projections are `out_gain` times the usual scale, so that what the layers
    # add outweighs the token's own embedding in the last hidden state (else a tied output would
    # just predict the input token again, whatever the layers computed).
    matrix("token_embd.weight", e, n_vocab, spec.get("embd_std", 0.5))
    gain = spec.get("out_gain", 6.0)
    vector("output_norm.weight", e, 1.0, 0.1)
    if spec.get("longrope"):
        half = spec["rope_dims"] // 2
        tensors.append(("rope_factors_long.weight", (1.0 + 30.0 * uniform(7, half) ** 2).astype(np.float32)))
        tensors.append(("rope_factors_short.weight", (1.0 + 0.1 * uniform(8, half)).astype(np.float32)))
    for il in range(spec["layers"]):
        b = f"blk.{il}."
        vector(b + "attn_norm.weight", e, 1.0, 0.1)
        if spec.get("fused"):
            matrix(b + "attn_qkv.weight", e, q_dim + 2 * kv_dim, e ** -0.5)
        else:
            matrix(b + "attn_q.weight", e, q_dim, e ** -0.5)
            matrix(b + "attn_k.weight", e, kv_dim, e ** -0.5)
            matrix(b + "attn_v.weight", e, kv_dim, e ** -0.5)
        if spec.get("qkv_bias"):
            vector(b + "attn_q.bias", q_dim, 0.0, 0.5)
            vector(b + "attn_k.bias", kv_dim, 0.0, 0.5)
            vector(b + "attn_v.bias", kv_dim, 0.0, 0.1)
        if spec.get("qk_norm"):
            vector(b + "attn_q_norm.weight", d, 1.0, 0.1)
            vector(b + "attn_k_norm.weight", d, 1.0, 0.1)
        matrix(b + "attn_output.weight", q_dim, e, gain * q_dim ** -0.5)
        vector(b + "ffn_norm.weight", e, 1.0, 0.1)
        if spec.get("fused"):
            matrix(b + "ffn_up.weight", e, 2 * ff, e ** -0.5)
        else:
            matrix(b + "ffn_gate.weight", e, ff, e ** -0.5)
            matrix(b + "ffn_up.weight", e, ff, e ** -0.5)
        matrix(b + "ffn_down.weight", ff, e, gain * ff ** -0.5)
    return tensors


# general.file_type as llama-quantize writes it for each target (Q3_K is its Q3_K_M, MXFP4 its
# MXFP4_MOE; with --pure both put every weight in that one type).
FILE_TYPES = {"F32": "ALL_F32", "Q8_0": "MOSTLY_Q8_0", "Q2_K": "MOSTLY_Q2_K", "Q3_K": "MOSTLY_Q3_K_M",
              "IQ4_NL": "MOSTLY_IQ4_NL", "IQ4_XS": "MOSTLY_IQ4_XS", "MXFP4": "MOSTLY_MXFP4_MOE"}


def write_model(gguf, quantizer, name, spec, vocab, template, target, path):
    """The model with its 2-D weights in `target` (F32: the unquantised model llama-quantize takes)."""
    arch = spec["arch"]
    writer = gguf.GGUFWriter(path + ".tmp", arch)
    writer.add_name(f"mnemo-test-{name} ({spec['like']} shapes, random weights)")
    p = arch + "."
    for key, value in [("block_count", spec["layers"]), ("embedding_length", spec["embd"]),
                       ("feed_forward_length", spec["ff"]), ("attention.head_count", spec["heads"]),
                       ("attention.head_count_kv", spec["kv_heads"]), ("attention.key_length", spec["head"]),
                       ("attention.value_length", spec["head"]), ("rope.dimension_count", spec.get("rope_dims", spec["head"]))]:
        writer.add_uint32(p + key, value)
    for key, value in spec["meta"].items():
        if isinstance(value, str):
            writer.add_string(p + key, value)
        elif isinstance(value, float):
            writer.add_float32(p + key, value)
        else:
            writer.add_uint32(p + key, value)
    writer.add_file_type(int(gguf.LlamaFileType[FILE_TYPES[target]]))
    if target != "F32":
        writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    add_vocabulary(writer, vocab, template)
    for tensor_name, values in family_tensors(spec, len(vocab["tokens"])):
        if values.ndim == 1 or target == "F32":
            writer.add_tensor(tensor_name, values)
            continue
        qtype = tensor_type(quantizer, gguf, tensor_name, values.shape[1], target)
        if qtype == gguf.GGMLQuantizationType.F16:
            writer.add_tensor(tensor_name, values.astype(np.float16))
        else:
            writer.add_tensor(tensor_name, quantizer.quantize(values, qtype), raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.replace(path + ".tmp", path)


def model_files():
    """(file name, family, type) of every test model."""
    return [(f"{family}-{qtype.lower()}.gguf", family, qtype) for family in FAMILIES for qtype in [BASELINE] + QUANT_TYPES]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gguf-py", required=True)
    parser.add_argument("--ggml-lib", required=True)
    parser.add_argument("--llama-cpp", required=True, help="the sdist's vendor/llama.cpp (vocabularies, templates)")
    parser.add_argument("--out", required=True)
    parser.add_argument("--only", nargs="*", help="families to make (default: all)")
    parser.add_argument("--base", action="store_true", help="also write each family's F32 model (NAME-f32.gguf)")
    args = parser.parse_args()
    sys.path.insert(0, args.gguf_py)
    import gguf  # noqa: E402 (the sdist's, not any other)

    quantizer = Quantizer(args.ggml_lib, gguf)
    os.makedirs(args.out, exist_ok=True)
    manifest = {}
    for family, spec in FAMILIES.items():
        if args.only and family not in args.only:
            continue
        vocab = cut_vocabulary(gguf, os.path.join(args.llama_cpp, "models", f"ggml-vocab-{spec['vocab']}.gguf"))
        with open(os.path.join(args.llama_cpp, "models", "templates", spec["template"])) as f:
            template = f.read()
        if args.base:
            write_model(gguf, quantizer, family, spec, vocab, template, "F32", os.path.join(args.out, f"{family}-f32.gguf"))
        for file_name, file_family, qtype in model_files():
            if file_family != family:
                continue
            path = os.path.join(args.out, file_name)
            write_model(gguf, quantizer, family, spec, vocab, template, qtype, path)
            with open(path, "rb") as f:
                manifest[file_name] = hashlib.sha256(f.read()).hexdigest()
            print(f"make_test_models: {file_name} {manifest[file_name][:16]}")
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
