"""The stateful cache's tiers through the server: a sliding-window model's history shrinks on the
device (--device-compact) when other traffic needs the room, the next turn finds it there, and
the output is what the same turns give with that history on the host instead."""

from __future__ import annotations

import requests

from helpers import read_metrics

LONG = ("User: Tell me about the fox who lived at the edge of a mountain village, and the baker who "
        "left bread on the windowsill every winter morning.\n" +
        " The fox watched the baker, the baker watched the snow, and the village slept under the stars." * 40)
OTHER = " apple banana cherry date elderberry fig grape honeydew kiwi lemon" * 55


def complete(url: str, prompt: str, max_tokens: int) -> dict:
    r = requests.post(url + "/v1/completions", json={"model": "m", "prompt": prompt, "max_tokens": max_tokens,
                                                     "temperature": 0}, timeout=300)
    assert r.status_code == 200, r.text
    return r.json()


def turns(url: str) -> tuple[dict, dict]:
    first = complete(url, LONG, 16)
    assert first["usage"]["prompt_tokens"] > 700
    complete(url, OTHER, 64)  # about 600 + 64 tokens: more than the pool has free
    metrics = read_metrics(url)
    again = complete(url, LONG + " What happened next?", 24)
    return again, metrics


def test_history_shrinks_on_the_device_and_the_next_turn_finds_it_there(start_server):
    # 1,280 tokens of device pool: 40 blocks of 32; the first turn's history takes 24. The host
    # holds F16, so that its copies come back identical (a compressed host's are within the noise band).
    common = ["--kv-tokens", "1280", "--host-swap-tokens", "1024", "--model-name", "m", "--kv-types", "f16"]
    on_device = start_server(*common, "--device-compact", "true")
    again, metrics = turns(on_device.url)
    assert metrics["mnemo_cache_device_compacted_chunks_total"] > 0
    assert metrics["mnemo_device_compact_chunks_cached"] > 0
    assert metrics["mnemo_device_compact_blocks"] >= 1
    details = again["usage"]["prompt_tokens_details"]
    assert details["cached_tokens_device"] > 0, details
    assert details["recomputed_tokens"] == 0, details
    assert on_device.terminate() == 0

    on_host = start_server(*common, "--device-compact", "false")
    reference, host_metrics = turns(on_host.url)
    assert host_metrics["mnemo_device_compact_chunks_cached"] == 0
    assert host_metrics["mnemo_cache_device_compacted_chunks_total"] == 0
    assert again["choices"][0]["text"] == reference["choices"][0]["text"]
    assert details["cached_tokens"] == reference["usage"]["prompt_tokens_details"]["cached_tokens"]


def test_a_compressed_host_serves_the_history_it_holds_in_k4v8(start_server):
    # serve's default --kv-types keeps the host in k4v8 (and 10% of it in F16 for preempted and
    # imported chunks); without a disk tier the history that leaves the device lives there.
    server = start_server("--kv-tokens", "1280", "--host-swap-tokens", "1024", "--model-name", "m",
                          "--device-compact", "false", "--disk-cache-bytes", "0")
    again, metrics = turns(server.url)
    details = again["usage"]["prompt_tokens_details"]
    assert details["cached_tokens_host"] > 0, details
    assert details["recomputed_tokens"] == 0, details
    assert again["choices"][0]["text"].strip()
    after = read_metrics(server.url)
    assert after["mnemo_host_exact_blocks_total"] >= 1
    moved = after["mnemo_kv_bytes_device_to_host_total"]
    chunks = after["mnemo_cache_demoted_chunks_total"] + after["mnemo_cache_ahead_copied_chunks_total"]
    assert moved > 0 and chunks > 0
    # A layer of a Gemma 3 270M chunk: 1 KV head x (256 + 256) x 32 tokens (32,768 bytes in
    # F16); in k4v8 the keys take 256 x 4 bytes of scales and minimums and 16 x 256 bytes of
    # nibbles (5,120), the values 256 q8_0 blocks of 34 (8,704): 13,824. A chunk moves whole
    # (18 layers) or compact (3).
    k4v8_layer = 13_824
    assert moved % k4v8_layer == 0, moved
    assert moved <= chunks * 18 * k4v8_layer, (moved, chunks)
