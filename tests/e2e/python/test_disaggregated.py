"""Disaggregated serving on loopback (SPEC D4, M4): a real etcd, a `--role prefill` and a
`--role decode` instance on the default model, `mnemo route` in front. A request's prompt is
computed on the prefill instance, its KV sent to the decode instance, which generates; output is
identical to a colocated instance's. With Caching-3 (the default) the decode instance sends the
request's KV back, so the next turn's prefill finds its history cached; without it, it does not."""

from __future__ import annotations

import os
import time

import pytest
import requests

from cluster_fixtures import etcd  # noqa: F401  (a pytest fixture, by name)
from conftest import MnemoServer
from helpers import output_text, read_metrics, sse_events, wait_for

HISTORY = [{"role": "user", "content": "Say hello to a friend you have not seen for a long time, and ask about their garden, "
                                       "their dog, the new bakery on the corner and the trip they planned to the sea."}]


@pytest.fixture(scope="module")
def disaggregated(etcd, start_server, mnemo_bin):  # noqa: F811  (the etcd fixture)
    name = f"d{os.getpid()}"
    common = ["--cluster", etcd, "--cluster-name", name, "--kv-tokens", "16384", "--model-name", "m"]
    prefill = start_server(*common, "--role", "prefill")
    decode = start_server(*common, "--role", "decode")
    colocated = start_server("--kv-tokens", "16384", "--model-name", "m")  # no cluster: the reference
    routers: list[MnemoServer] = []

    def start_router(*extra: str) -> MnemoServer:
        r = MnemoServer([mnemo_bin, "route", "--cluster", etcd, "--cluster-name", name, "--port", "0", *extra])
        routers.append(r)
        r.start()
        wait_for(lambda: read_metrics(r.url).get("mnemo_router_instances") == 1
                 and read_metrics(r.url).get("mnemo_router_prefill_instances") == 1, 15, 0.1, "both instances in the view")
        return r

    yield {"prefill": prefill, "decode": decode, "colocated": colocated, "start_router": start_router}
    for r in routers:
        if r.proc is not None and r.proc.poll() is None:
            r.terminate()


def post(url: str, body: dict) -> requests.Response:
    r = requests.post(url + "/v1/chat/completions", json={"model": "m", **body}, timeout=120)
    assert r.status_code == 200, r.text
    return r


def streamed_text(url: str, body: dict) -> str:
    text = ""
    with requests.post(url + "/v1/chat/completions", json={"model": "m", **body, "stream": True}, stream=True, timeout=120) as r:
        for event in sse_events(r):
            if event == "[DONE]":
                break
            for choice in event["choices"]:
                text += choice.get("delta", {}).get("content") or ""
    return text


def test_output_is_identical_colocated_and_disaggregated(disaggregated):
    router = disaggregated["start_router"]()
    reference = disaggregated["colocated"].url
    for sampling in ({"temperature": 0}, {"temperature": 0.8, "seed": 5}):
        body = {"messages": HISTORY, "max_tokens": 24, **sampling}
        before = read_metrics(router.url)
        got = post(router.url, body)
        after = read_metrics(router.url)
        assert got.json()["choices"][0]["message"]["content"] == post(reference, body).json()["choices"][0]["message"]["content"]
        assert after["mnemo_router_prefills_total"] == before.get("mnemo_router_prefills_total", 0) + 1
        assert after.get("mnemo_router_prefill_failures_total", 0) == 0
        assert got.headers["X-Mnemo-Instance"] in "".join(disaggregated["decode"].stdout_lines)
        # The decode instance found the prompt's KV (all whole chunks below its last token).
        usage = got.json()["usage"]
        assert usage["prompt_tokens_details"]["cached_tokens"] >= (usage["prompt_tokens"] - 1) // 32 * 32 - 32, usage
        assert streamed_text(router.url, body) == streamed_text(reference, body)


def test_the_prompt_streams_to_the_decode_instance_layer_by_layer_while_it_is_computed(disaggregated):
    # A prompt new to both instances, computed in one step: its whole chunks below the last token
    # leave the prefill instance one layer at a time during the step (SPEC D3), one message per
    # layer of Gemma 3 270M's 18, and the decode instance caches them once all 18 are in.
    router = disaggregated["start_router"]()
    prefill, decode = disaggregated["prefill"].url, disaggregated["decode"].url
    messages = [{"role": "user", "content": HISTORY[0]["content"] + f" Then tell me, in plain words for a child of {os.getpid()}"
                 " years, how a cook can pass each finished layer of a cake to the decorator while the next layer is"
                 " still in the oven, and why that makes the cake ready sooner."}]
    sent = read_metrics(prefill).get("mnemo_kv_replica_layer_messages_total", 0)
    assembled = read_metrics(decode).get("mnemo_kv_received_assembled_total", 0)
    got = post(router.url, {"messages": messages, "max_tokens": 8, "temperature": 0})
    assert read_metrics(prefill)["mnemo_kv_replica_layer_messages_total"] - sent == 18
    assert read_metrics(decode)["mnemo_kv_received_assembled_total"] == assembled + 1
    assert read_metrics(decode).get("mnemo_kv_received_pending_assemblies", 0) == 0
    usage = got.json()["usage"]
    assert usage["prompt_tokens"] > 64, usage  # at least two whole chunks below the last token
    assert usage["prompt_tokens_details"]["cached_tokens"] == (usage["prompt_tokens"] - 1) // 32 * 32, usage
    assert got.json()["choices"][0]["message"]["content"] == post(disaggregated["colocated"].url, {
        "messages": messages, "max_tokens": 8, "temperature": 0}).json()["choices"][0]["message"]["content"]
    router.terminate()


def test_caching3_sends_the_turn_back_so_the_next_prefill_hits(disaggregated):
    prefill = disaggregated["prefill"].url
    for caching3 in ("false", "true"):
        router = disaggregated["start_router"]("--caching3", caching3)
        history = [{"role": "user", "content": HISTORY[0]["content"] + f" (variant {caching3})"}]
        received = read_metrics(prefill).get("mnemo_kv_transfer_messages_received_total", 0)
        imported = read_metrics(prefill).get("mnemo_cache_imported_chunks_total", 0)
        first = post(router.url, {"messages": history, "max_tokens": 48, "temperature": 0})
        reply = first.json()["choices"][0]["message"]["content"]
        turn_tokens = first.json()["usage"]["prompt_tokens"] + first.json()["usage"]["completion_tokens"]
        if caching3 == "true":  # the reply's chunks came back to the prefill instance
            # Earlier tests of the module imported chunks here too, so "any import" says nothing:
            # wait for this turn's copy to arrive, then for its chunks past those the prefill
            # instance computed itself (less the assertion's slack of one) to be taken in, or for
            # a second to pass (a copy can find them cached already and add none).
            wait_for(lambda: read_metrics(prefill).get("mnemo_kv_transfer_messages_received_total", 0) > received, 10, 0.05,
                     "the turn's KV sent back to prefill")
            back = max(1, (turn_tokens - 1) // 32 - first.json()["usage"]["prompt_tokens"] // 32 - 1)
            arrived = time.monotonic()
            wait_for(lambda: read_metrics(prefill).get("mnemo_cache_imported_chunks_total", 0) - imported >= back
                     or time.monotonic() - arrived > 1.0, 10, 0.05, "KV back on prefill")
        hits_before = read_metrics(prefill).get("mnemo_prefix_cache_hit_tokens_total", 0)
        post(router.url, {"messages": history + [{"role": "assistant", "content": reply}, {"role": "user", "content": "Thanks!"}],
                          "max_tokens": 4, "temperature": 0})
        hits = read_metrics(prefill)["mnemo_prefix_cache_hit_tokens_total"] - hits_before
        prompt_chunks_tokens = (first.json()["usage"]["prompt_tokens"] - 1) // 32 * 32
        if caching3 == "true":
            assert hits >= (turn_tokens - 1) // 32 * 32 - 32, (hits, turn_tokens)  # prompt and reply
        else:
            assert imported == read_metrics(prefill).get("mnemo_cache_imported_chunks_total", 0)  # nothing came back
            assert hits <= prompt_chunks_tokens, (hits, prompt_chunks_tokens)  # only what it computed itself
        router.terminate()


def respond(url: str, body: dict) -> requests.Response:
    r = requests.post(url + "/v1/responses", json={"model": "m", **body}, timeout=120)
    assert r.status_code == 200, r.text
    return r


def test_responses_turns_are_disaggregated_and_their_history_comes_back_to_prefill(disaggregated):
    # A stored conversation's turn: the decode instance (its owner) says what the prompt is (its
    # history is there), the prefill instance computes it and sends the KV; Caching-3 sends each
    # turn back, so the next turn's prefill finds the history. Output equals a colocated
    # instance's over the same conversation.
    router = disaggregated["start_router"]()
    prefill = disaggregated["prefill"].url
    reference = disaggregated["colocated"].url
    question = HISTORY[0]["content"] + " (stored)"
    body = {"input": question, "max_output_tokens": 40, "temperature": 0}
    before = read_metrics(router.url).get("mnemo_router_prefills_total", 0)
    received = read_metrics(prefill).get("mnemo_kv_transfer_messages_received_total", 0)
    imported = read_metrics(prefill).get("mnemo_cache_imported_chunks_total", 0)
    first = respond(router.url, body).json()
    expected_first = respond(reference, body).json()
    assert output_text(first) == output_text(expected_first)
    assert read_metrics(router.url)["mnemo_router_prefills_total"] == before + 1
    assert read_metrics(router.url).get("mnemo_router_prefill_failures_total", 0) == 0
    usage = first["usage"]
    assert usage["input_tokens_details"]["cached_tokens"] >= (usage["input_tokens"] - 1) // 32 * 32 - 32, usage
    turn_tokens = usage["input_tokens"] + usage["output_tokens"]
    # This turn's copy, not any import (earlier tests of the module imported chunks there too),
    # as in the Caching-3 test above.
    wait_for(lambda: read_metrics(prefill).get("mnemo_kv_transfer_messages_received_total", 0) > received, 10, 0.05,
             "the turn's KV sent back to prefill")
    back = max(1, (turn_tokens - 1) // 32 - usage["input_tokens"] // 32 - 1)
    arrived = time.monotonic()
    wait_for(lambda: read_metrics(prefill).get("mnemo_cache_imported_chunks_total", 0) - imported >= back
             or time.monotonic() - arrived > 1.0, 10, 0.05, "KV back on prefill")

    hits_before = read_metrics(prefill).get("mnemo_prefix_cache_hit_tokens_total", 0)
    follow_up = {"input": "Thanks! And what about the dog?", "max_output_tokens": 16, "temperature": 0}
    second = respond(router.url, {**follow_up, "previous_response_id": first["id"]})
    assert second.headers["X-Mnemo-Instance"] in "".join(disaggregated["decode"].stdout_lines)
    assert read_metrics(router.url)["mnemo_router_prefills_total"] == before + 2
    hits = read_metrics(prefill)["mnemo_prefix_cache_hit_tokens_total"] - hits_before
    assert hits >= (turn_tokens - 1) // 32 * 32 - 32, (hits, turn_tokens)  # the first turn's prompt and reply
    expected_second = respond(reference, {**follow_up, "previous_response_id": expected_first["id"]}).json()
    assert output_text(second.json()) == output_text(expected_second)
    # The decode instance found the second prompt computed too.
    usage = second.json()["usage"]
    assert usage["input_tokens_details"]["cached_tokens"] >= (usage["input_tokens"] - 1) // 32 * 32 - 32, usage
