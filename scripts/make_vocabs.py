#!/usr/bin/env python3
"""Vocab-only GGUFs of the two byte-level BPE tokenizers llama.cpp's test vocabularies lack, for the
tokenizer tests (tests/tokenizer/llama_vocab_test.cpp), made from the tokenizers' own files on
PyPI (the wheels are downloaded without their dependencies and read as zip files):

  - tekken (Mistral Nemo, Ministral 3, Mistral Small 3.x; tokenizer.ggml.pre "tekken"):
    mistral-common's tekken_240911.json, its 1,000 special tokens first (the 20 its v3 files
    name, then <SPECIAL_n>), then the 130,072 ranks a 131,072-token model uses;
  - o200k (GPT-4o, Phi-4-mini; tokenizer.ggml.pre "gpt-4o"): quicktok-v1's o200k ranks and its two
    special tokens, at their ids.

Both are tiktoken-style rank lists; the BPE merges are recovered from the ranks the way
tiktoken-to-Hugging Face conversions do (each token's last merge is the pair its bytes meet in
when merged by rank), and the tokens are written in GPT-2's byte-to-unicode alphabet, as
llama.cpp's converter writes byte-level vocabularies.

  make_vocabs.py --gguf-py DIR --out DIR
"""
import argparse
import base64
import glob
import json
import os
import struct
import subprocess
import sys
import tempfile
import zipfile

MISTRAL_COMMON = "mistral-common==1.13.1"
QUICKTOK = "quicktok-v1==0.4.0"

# mistral-common's SpecialTokens of a v3 tekken file, in rank order.
TEKKEN_SPECIALS = ["<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
                   "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[TOOL_CALLS]", "[IMG]", "<pad>", "[IMG_BREAK]", "[IMG_END]",
                   "[PREFIX]", "[MIDDLE]", "[SUFFIX]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[TOOL_CONTENT]"]
TEKKEN_SPECIAL_COUNT = 1000
TEKKEN_VOCAB_SIZE = 131072


def byte_alphabet():
    """GPT-2's reversible map of bytes to printable characters."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    chars = keep[:]
    extra = 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            chars.append(256 + extra)
            extra += 1
    return {b: chr(c) for b, c in zip(keep, chars)}


def merges_of(ranks):
    """The merge that makes each multi-byte token, from the ranks alone."""
    merges = []
    for token, rank in sorted(ranks.items(), key=lambda item: item[1]):
        if len(token) < 2:
            continue
        parts = [bytes([b]) for b in token]
        while True:
            best = None
            for i in range(len(parts) - 1):
                r = ranks.get(parts[i] + parts[i + 1])
                if r is not None and r < rank and (best is None or r < best[1]):
                    best = (i, r)
            if best is None:
                break
            i = best[0]
            parts[i:i + 2] = [parts[i] + parts[i + 1]]
        if len(parts) != 2:
            raise SystemExit(f"token of rank {rank} does not come from one merge ({len(parts)} parts)")
        merges.append((parts[0], parts[1]))
    return merges


def write_vocab(gguf, path, name, pre, tokens, types, merges, ids):
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_name(name)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    for key, value in ids.items():
        writer.add_uint32(f"tokenizer.ggml.{key}_token_id", value)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def byte_level(alphabet, data):
    return "".join(alphabet[b] for b in data)


def make_tekken(gguf, wheel, out):
    with zipfile.ZipFile(wheel) as z:
        model = json.loads(z.read("mistral_common/data/tekken_240911.json"))
    ranks = {base64.b64decode(entry["token_bytes"]): entry["rank"] for entry in model["vocab"]}
    kept = {token: rank for token, rank in ranks.items() if rank < TEKKEN_VOCAB_SIZE - TEKKEN_SPECIAL_COUNT}
    alphabet = byte_alphabet()
    specials = TEKKEN_SPECIALS + [f"<SPECIAL_{i}>" for i in range(len(TEKKEN_SPECIALS), TEKKEN_SPECIAL_COUNT)]
    by_rank = sorted(kept.items(), key=lambda item: item[1])
    tokens = specials + [byte_level(alphabet, token) for token, _ in by_rank]
    types = [3] * len(specials) + [1] * len(by_rank)
    merges = [f"{byte_level(alphabet, a)} {byte_level(alphabet, b)}" for a, b in merges_of(kept)]
    write_vocab(gguf, os.path.join(out, "ggml-vocab-tekken.gguf"), "tekken", "tekken", tokens, types, merges,
                {"unknown": 0, "bos": 1, "eos": 2})


def make_o200k(gguf, wheel, out):
    with zipfile.ZipFile(wheel) as z:
        vocab = z.read("quicktok/data/o200k.vocab")
        special = z.read("quicktok/data/o200k.special")
    # [count u32] then per token [length u16][bytes][rank u32]; specials [rank u32][length u16][bytes].
    (count,) = struct.unpack_from("<I", vocab, 0)
    at, ranks = 4, {}
    for _ in range(count):
        (length,) = struct.unpack_from("<H", vocab, at)
        token = vocab[at + 2:at + 2 + length]
        (rank,) = struct.unpack_from("<I", vocab, at + 2 + length)
        ranks[token] = rank
        at += 6 + length
    (n_special,) = struct.unpack_from("<I", special, 0)
    at, specials = 4, {}
    for _ in range(n_special):
        rank, length = struct.unpack_from("<IH", special, at)
        specials[rank] = special[at + 6:at + 6 + length].decode()
        at += 6 + length
    alphabet = byte_alphabet()
    size = max(max(ranks.values()), max(specials)) + 1
    tokens = [f"<|reserved_{i}|>" for i in range(size)]
    types = [4] * size  # ids no token has: unused
    for token, rank in ranks.items():
        tokens[rank] = byte_level(alphabet, token)
        types[rank] = 1
    for rank, text in specials.items():
        tokens[rank] = text
        types[rank] = 3
    merges = [f"{byte_level(alphabet, a)} {byte_level(alphabet, b)}" for a, b in merges_of(ranks)]
    endoftext = next(rank for rank, text in specials.items() if text == "<|endoftext|>")
    write_vocab(gguf, os.path.join(out, "ggml-vocab-gpt-4o.gguf"), "o200k", "gpt-4o", tokens, types, merges,
                {"bos": endoftext, "eos": endoftext})


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gguf-py", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    sys.path.insert(0, args.gguf_py)
    import gguf  # noqa: E402

    os.makedirs(args.out, exist_ok=True)
    with tempfile.TemporaryDirectory() as wheels:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", wheels, MISTRAL_COMMON, QUICKTOK],
                       check=True)
        make_tekken(gguf, glob.glob(os.path.join(wheels, "mistral_common-*.whl"))[0], args.out)
        make_o200k(gguf, glob.glob(os.path.join(wheels, "quicktok_v1-*.whl"))[0], args.out)
    print("make_vocabs: tekken and gpt-4o vocabularies in", args.out)


if __name__ == "__main__":
    main()
