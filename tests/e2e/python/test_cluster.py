"""A cluster on loopback: a real etcd, two `mnemo serve --cluster` instances on the default model
and `mnemo route` in front (SPEC M6-M8). Second turns land where their prefix is cached; output
through the router equals output from an instance directly; stored responses are found by a
restarted router (their owners are in etcd); a killed instance stops getting requests within its
lease TTL. The cluster tests run as their own CTest entry (cluster_e2e)."""

from __future__ import annotations

import json
import os
import re
import socket
import time

import pytest
import requests

from conftest import MnemoServer
from cluster_fixtures import reference_model_path, etcd, followed, free_port, instance_by_id, transport_of  # noqa: F401
from helpers import UNSIGNED_PEER, read_metrics, wait_for

CHAT = {"model": "m", "max_tokens": 12, "temperature": 0}
# Long enough for whole 32-token chunks of a first turn to be cached.
LONG_INPUT = ("Say hello to a friend you have not seen for a long time, and ask about their garden, their dog, the "
              "new bakery on the corner and the trip they planned to the sea last summer.")


# Instance 0's `mnemo profile`, hand-written: a prompt token costs 1 ms at every position, what
# the router's default flags say too, so where the other tests' requests go is unchanged.
PROFILE = {"per_token_seconds": 0.001, "per_context_token_seconds": 0,
           "copy_bytes_per_second": 8e9, "disk_read_bytes_per_second": 1e9}


@pytest.fixture(scope="module")
def cluster(etcd, start_server, mnemo_bin, tmp_path_factory):
    name = f"c{os.getpid()}"
    profile = tmp_path_factory.mktemp("profile") / "model.profile.json"
    profile.write_text(json.dumps(PROFILE))
    instances = [start_server("--cluster", etcd, "--cluster-name", name, "--kv-tokens", "16384", "--model-name", "m",
                              *(["--profile", str(profile)] if i == 0 else [])) for i in range(2)]
    routers: list[MnemoServer] = []

    def start_router(*extra: str) -> MnemoServer:
        r = MnemoServer([mnemo_bin, "route", "--cluster", etcd, "--cluster-name", name, "--port", "0", *extra])
        routers.append(r)
        r.start()
        wait_for(lambda: read_metrics(r.url).get("mnemo_router_instances") == 2, 15, 0.1, "both instances in the view")
        return r

    yield {"instances": instances, "router": start_router(), "start_router": start_router, "etcd": etcd}
    for r in routers:
        if r.proc is not None and r.proc.poll() is None:
            r.terminate()


def chat(url: str, messages: list[dict], **extra) -> requests.Response:
    r = requests.post(url + "/v1/chat/completions", json={**CHAT, "messages": messages, **extra}, timeout=120)
    assert r.status_code == 200, r.text
    return r


def test_second_turns_land_where_their_prefix_is_cached(cluster):
    router = cluster["router"].url
    homes = set()
    for topic in ["the sea", "mountains", "a city at night", "the desert"]:
        # Long enough for whole 32-token chunks of the first turn to be cached.
        history = [{"role": "user", "content": f"Write two sentences about {topic}. Use many concrete details: colours, "
                                               "sounds, smells, the time of day, the weather, and the people or animals "
                                               "one might meet there. Keep the tone calm and the words simple."}]
        first = chat(router, history)
        home = first.headers["X-Mnemo-Instance"]
        homes.add(home)
        history += [{"role": "assistant", "content": first.json()["choices"][0]["message"]["content"]},
                    {"role": "user", "content": "Now one more sentence."}]
        second = chat(router, history)
        assert second.headers["X-Mnemo-Instance"] == home, topic
        assert second.json()["usage"]["prompt_tokens_details"]["cached_tokens"] > 0, second.json()["usage"]
    # Both instances took first turns: an idle cluster spreads new conversations.
    assert len(homes) == 2, homes
    metrics = read_metrics(router)
    assert metrics["mnemo_router_predicted_cached_tokens_total"] > 0


def test_the_router_charges_a_profiled_instance_its_own_cost(cluster):
    router = cluster["router"].url
    chat(router, [{"role": "user", "content": "Name a colour."}])
    profiled = {k: v for k, v in read_metrics(router).items() if k.startswith("mnemo_router_profiled_seconds_per_prompt_token{")}
    # Only instance 0 published a profile; the router read its cost at position 0 from it.
    assert len(profiled) == 1, profiled
    [(key, value)] = profiled.items()
    instance = re.search(r'instance="([^"]+)"', key).group(1)
    assert instance_by_id(cluster, instance) is cluster["instances"][0]
    assert value == pytest.approx(PROFILE["per_token_seconds"])


def test_output_through_the_router_equals_an_instance_directly(cluster):
    messages = [{"role": "user", "content": "Name three colours."}]
    routed = chat(cluster["router"].url, messages)
    direct = chat(cluster["instances"][0].url, messages)
    assert routed.json()["choices"][0]["message"]["content"] == direct.json()["choices"][0]["message"]["content"]
    # Streamed through the router: the same text, chunk by chunk.
    r = requests.post(cluster["router"].url + "/v1/chat/completions",
                      json={**CHAT, "messages": messages, "stream": True}, stream=True, timeout=120)
    assert r.status_code == 200
    assert r.headers["Content-Type"].startswith("text/event-stream")
    text, done = "", False
    for raw in r.iter_lines():
        line = raw.decode("utf-8")  # SSE is UTF-8 whatever the header says
        if not line:
            continue
        assert line.startswith("data: "), line
        if line == "data: [DONE]":
            done = True
            break
        delta = json.loads(line[6:])["choices"][0]["delta"]
        text += delta.get("content") or ""
    assert done
    assert text == direct.json()["choices"][0]["message"]["content"]


def test_a_stream_to_a_slow_client_is_held_back_not_queued_and_arrives_whole(cluster):
    # A client with a tiny receive window that reads nothing until the router's relay has had to
    # wait for it (over 256 bytes of the stream held for it; 8 choices with top-20 logprobs make
    # about 2 MB, more than the kernel's socket buffers take); then every token arrives.
    router = cluster["start_router"]("--relay-buffer-bytes", "256")
    max_tokens, n = 300, 8
    request = {**CHAT, "messages": [{"role": "user", "content": "Tell a long story about a lighthouse."}],
               "max_tokens": max_tokens, "ignore_eos": True, "stream": True, "logprobs": True, "top_logprobs": 20,
               "n": n, "temperature": 1.0, "seed": 5}
    body = json.dumps(request).encode()
    host, port = router.url.removeprefix("http://").split(":")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
    sock.connect((host, int(port)))
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Connection: close\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    wait_for(lambda: read_metrics(router.url)["mnemo_router_relay_waits_total"] > 0, 120, 0.2,
             "the relay to wait for its slow client")
    time.sleep(7)  # longer than a default 5 s write timeout: neither the router nor the instance gives up
    received = b""
    sock.settimeout(120)
    while chunk := sock.recv(65536):
        received += chunk
    sock.close()
    head, _, chunked = received.partition(b"\r\n\r\n")
    assert b" 200 " in head.split(b"\r\n")[0], head
    # Undo the chunked transfer encoding, then read the events.
    stream, rest = b"", chunked
    while rest:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            break
        stream, rest = stream + rest[:size], rest[size + 2:]
    events = [e.removeprefix("data: ") for e in stream.decode().split("\n\n") if e.startswith("data: ")]
    assert events[-1] == "[DONE]"
    tokens, finished = [0] * n, [None] * n
    for event in events[:-1]:
        for choice in json.loads(event)["choices"]:
            tokens[choice["index"]] += len((choice.get("logprobs") or {}).get("content") or [])
            finished[choice["index"]] = choice["finish_reason"] or finished[choice["index"]]
    assert tokens == [max_tokens] * n
    assert finished == ["length"] * n
    assert read_metrics(router.url)["mnemo_router_resumed_streams_total"] == 0  # no failover was needed


def test_a_tokenizing_router_follows_the_instances_caches_by_their_events(cluster):
    # With the model, the router names a prompt's chunks as the instances' indexes do and learns
    # what each holds from its insert and evict events.
    router = cluster["start_router"]("--model", reference_model_path())
    wait_for(lambda: len(followed(router.url)) == 2, 30, 0.2, "the router to follow both instances' caches")
    topic = ("Plan a week of dinners for a family of four: one fish night, one soup night, something with beans, "
             "a pasta the children like, and leftovers on Friday. ")
    held_before = followed(router.url)
    first = chat(router.url, [{"role": "user", "content": topic + "Start with Monday."}])
    home = first.headers["X-Mnemo-Instance"]
    # The turn's chunks reach the router as events (inserted before the reply was sent).
    wait_for(lambda: followed(router.url)[home] > held_before[home], 30, 0.1, "the first turn's insert events")
    history = [{"role": "user", "content": topic + "Start with Monday."},
               {"role": "assistant", "content": first.json()["choices"][0]["message"]["content"]},
               {"role": "user", "content": "And Tuesday?"}]
    before = read_metrics(router.url)["mnemo_router_predicted_cached_tokens_total"]
    second = chat(router.url, history)
    assert second.headers["X-Mnemo-Instance"] == home
    cached = second.json()["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached >= 32
    # The router's keys are the instance's: it predicted exactly what the instance found.
    assert read_metrics(router.url)["mnemo_router_predicted_cached_tokens_total"] - before == cached

    # A stored response, then deleted: its chunks' insert, then evict events reach the router.
    held_before = followed(router.url)
    r = requests.post(router.url + "/v1/responses", timeout=120,
                      json={"model": "m", "max_output_tokens": 8, "temperature": 0, "store": True,
                            "input": "Write down a long shopping list for those dinners, aisle by aisle, "
                                     "with quantities for four people and a note on what to buy fresh."})
    assert r.status_code == 200, r.text
    owner = r.headers["X-Mnemo-Instance"]
    grown = wait_for(lambda: (n := followed(router.url)[owner]) > held_before[owner] and n, 30, 0.2,
                     "the turn's chunks to be followed")
    deleted = requests.delete(router.url + f"/v1/responses/{r.json()['id']}", timeout=60)
    assert deleted.status_code == 200, deleted.text
    wait_for(lambda: followed(router.url)[owner] < grown, 30, 0.2, "the deleted turn's evict events")


def long_text(n_items: int, salt: str) -> str:
    colours = ["red", "green", "amber", "violet", "silver", "ochre", "teal", "crimson"]
    places = ["harbour", "orchard", "library", "market", "station", "meadow", "bridge", "bakery"]
    return " ".join(f"{salt} note {i}: the {colours[i % 8]} kite drifted over the {places[(i * 3) % 8]} "
                    f"while {i * 7 % 13} gulls argued about item {i * 11 % 17}." for i in range(n_items))


def test_the_router_predicts_sliding_window_history_as_the_instance_reuses_it(etcd, start_server, mnemo_bin):
    # Gemma 3 keeps a chunk a window (512 tokens) before its conversation's end as its global
    # layers only once it leaves the device. A prompt that branches off within a window after
    # such chunks cannot use them (its new tokens would read their local layers): the instance
    # recomputes them, and the tokenizing router, told which chunks are compact by the events,
    # predicts exactly that.
    name = f"swa{os.getpid()}"
    start_server("--cluster", etcd, "--cluster-name", name, "--kv-tokens", "1024", "--model-name", "m")
    router = MnemoServer([mnemo_bin, "route", "--cluster", etcd, "--cluster-name", name, "--port", "0",
                          "--model", reference_model_path()])
    router.start()
    try:
        wait_for(lambda: len(followed(router.url)) == 1, 30, 0.2, "the router to follow the instance's cache")

        def complete(prompt: str) -> dict:
            r = requests.post(router.url + "/v1/completions", timeout=120,
                              json={"model": "m", "prompt": prompt, "max_tokens": 4, "temperature": 0})
            assert r.status_code == 200, r.text
            return r.json()

        a = long_text(32, "Ann")
        first = complete(a)
        assert 700 <= first["usage"]["prompt_tokens"] <= 960, first["usage"]
        # Another long prompt needs the device: the first one's leading chunks leave it compact.
        complete(long_text(34, "Bob"))
        wait_for(lambda: sum(v for k, v in read_metrics(router.url).items()
                             if k.startswith("mnemo_router_followed_compact_chunks{")) > 0,
                 30, 0.1, "compact chunks in the router's view")
        time.sleep(0.5)  # the rest of that eviction's events
        # Branch off the first prompt at about 60%: its compact chunks are within a window of the
        # new tokens, so only its whole chunks after them are reused.
        before = read_metrics(router.url)["mnemo_router_predicted_cached_tokens_total"]
        branch = complete(a[: len(a) * 6 // 10] + " But then the weather turned, and")
        cached = branch["usage"]["prompt_tokens_details"]["cached_tokens"]
        recomputed = branch["usage"]["prompt_tokens_details"].get("recomputed_tokens", 0)
        assert cached > 0 and recomputed > 0, branch["usage"]
        assert read_metrics(router.url)["mnemo_router_predicted_cached_tokens_total"] - before == cached
    finally:
        router.terminate()


def test_the_cache_events_endpoint_checks_its_query_and_serves_a_snapshot(cluster):
    url = cluster["instances"][0].url + "/v1/internal/cache_events"
    for query in ["after=abc", "wait_ms=99999", "epoch=-1", "after=", "epoch=1e3"]:
        r = requests.get(f"{url}?{query}", headers=UNSIGNED_PEER, timeout=10)
        assert r.status_code == 400, (query, r.text)
        assert "unsigned integers" in r.json()["error"]["message"]
    assert requests.get(url + "?wait_ms=0", timeout=10).status_code == 403  # a client, not a peer
    first = requests.get(url + "?wait_ms=0", headers=UNSIGNED_PEER, timeout=10).json()
    assert first["snapshot"] is True and first["chunk_tokens"] == 32 and first["epoch"] > 0
    # Gemma 3's sliding window, which decides where compact (global-layer) chunks are usable.
    assert first["sliding_window"] == 512
    assert isinstance(first["held"], list) and isinstance(first["compact"], list)
    assert all(isinstance(e, list) and len(e) == 2 and e[1] in (0, 1, 2) for e in first["events"])
    # Following on from it: no snapshot, and (nothing new) no events after a short wait.
    again = requests.get(f"{url}?epoch={first['epoch']}&after={first['next']}&wait_ms=100", headers=UNSIGNED_PEER,
                         timeout=10).json()
    assert again["snapshot"] is False and again["next"] >= first["next"]


def test_an_x_session_id_pins_a_session_to_one_instance(cluster):
    router = cluster["router"].url
    homes = {}
    for session in (f"session-{i}" for i in range(12)):  # all on one of two instances: p = 2^-11
        for topic in ("rivers", "clocks"):  # different prompts: nothing cached in common
            r = requests.post(router + "/v1/chat/completions", timeout=120, headers={"X-Session-ID": session},
                              json={"messages": [{"role": "user", "content": f"One word about {topic}."}],
                                    "max_tokens": 2, "temperature": 0})
            assert r.status_code == 200, r.text
            homes.setdefault(session, set()).add(r.headers["X-Mnemo-Instance"])
    assert all(len(h) == 1 for h in homes.values()), homes
    assert len(set().union(*homes.values())) == 2, homes  # sessions spread over both instances
    long = requests.post(router + "/v1/chat/completions", headers={"X-Session-ID": "x" * 300}, timeout=30,
                         json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1})
    assert long.status_code == 400


def test_bad_requests_get_clear_errors_from_the_router(cluster):
    router = cluster["router"].url
    r = requests.post(router + "/v1/chat/completions", data=b"{not json", headers={"Content-Type": "application/json"}, timeout=10)
    assert r.status_code == 400 and "JSON" in r.json()["error"]["message"]
    r = requests.post(router + "/v1/chat/completions", json={"messages": "hi"}, timeout=10)
    assert r.status_code == 400 and "messages" in r.json()["error"]["message"]
    r = requests.post(router + "/v1/responses", json={"input": "hi", "previous_response_id": "resp_unknown"}, timeout=10)
    assert r.status_code == 404
    assert requests.get(router + "/health", timeout=10).status_code == 200


def test_responses_continue_on_their_instance_and_survive_a_router_restart(cluster):
    router = cluster["router"].url
    first = requests.post(router + "/v1/responses", json={"model": "m", "input": LONG_INPUT, "max_output_tokens": 8,
                                                         "temperature": 0}, timeout=120)
    assert first.status_code == 200, first.text
    home = first.headers["X-Mnemo-Instance"]
    rid = first.json()["id"]
    second = requests.post(router + "/v1/responses", json={"model": "m", "input": "Again.", "previous_response_id": rid,
                                                          "max_output_tokens": 8, "temperature": 0}, timeout=120)
    assert second.status_code == 200, second.text
    assert second.headers["X-Mnemo-Instance"] == home
    assert second.json()["usage"]["input_tokens_details"]["cached_tokens"] > 0
    # A new router knows nothing in memory: the owner comes from etcd.
    fresh = cluster["start_router"]()
    got = requests.get(fresh.url + "/v1/responses/" + second.json()["id"], timeout=30)
    assert got.status_code == 200, got.text
    assert got.json()["id"] == second.json()["id"]
    third = requests.post(fresh.url + "/v1/responses", json={"model": "m", "input": "Once more.", "previous_response_id":
                                                            second.json()["id"], "max_output_tokens": 8, "temperature": 0},
                          timeout=120)
    assert third.status_code == 200, third.text
    assert third.headers["X-Mnemo-Instance"] == home


def test_kv_pushed_to_another_instance_serves_the_next_turn_identically(cluster):
    a, b = cluster["instances"]
    history = [{"role": "user", "content": "Describe a lighthouse keeper's day, hour by hour, from dawn to night: the "
                                           "lamp, the stairs, the logbook, the weather, the ships and the long evening. "
                                           "Mention the gulls, the fog horn, the supply boat that comes on Thursdays, the "
                                           "letters from the mainland and the radio that only works when the wind is "
                                           "from the west. Keep it calm, simple and full of small details."}]
    first = chat(a.url, history)
    history += [{"role": "assistant", "content": first.json()["choices"][0]["message"]["content"]},
                {"role": "user", "content": "What does the keeper eat?"}]
    second_turn = {**CHAT, "messages": history}
    # A sends the KV it holds for this prompt to B's transport (UCX); B inserts it into its cache.
    pushed = requests.post(a.url + "/v1/internal/kv_push", headers=UNSIGNED_PEER,
                           json={"target": transport_of(b), "api": "chat", "request": second_turn}, timeout=60)
    assert pushed.status_code == 200, pushed.text
    assert pushed.json()["chunks"] >= 2 and pushed.json()["bytes"] > 0
    on_b = chat(b.url, history)
    usage = on_b.json()["usage"]["prompt_tokens_details"]
    assert usage["cached_tokens"] >= 32 * pushed.json()["chunks"] - 32, usage  # from B's host tier
    assert usage["cached_tokens_host"] > 0, usage
    on_a = chat(a.url, history)  # where the KV was computed
    assert on_b.json()["choices"][0]["message"]["content"] == on_a.json()["choices"][0]["message"]["content"]
    # Both ends count it.
    sent, received = read_metrics(a.url), read_metrics(b.url)
    assert sent["mnemo_cache_exported_chunks_total"] >= pushed.json()["chunks"]
    assert sent["mnemo_kv_transfer_bytes_sent_total"] >= pushed.json()["bytes"]
    assert received["mnemo_cache_imported_chunks_total"] >= 1
    assert received["mnemo_kv_transfer_messages_received_total"] >= 1


def test_the_router_moves_kv_to_an_idle_instance_when_that_beats_recomputing(cluster):
    # A router for which any request in flight outweighs any prompt: a busy instance's prefix is
    # then fetched by an idle one instead of waited for.
    router = cluster["start_router"]("--request-seconds", "1000")
    topic = ("Describe a night market in a river town: the lanterns, the food stalls, the music, the boats tied "
             "along the quay, the smell of grilled fish and sweet bread, the children and the old card players. ")
    first = chat(router.url, [{"role": "user", "content": topic + "Start with the lanterns."}])
    holder = first.headers["X-Mnemo-Instance"]
    # The holder gets busy: a long request whose prompt shares the cached prefix goes there.
    busy = requests.post(router.url + "/v1/chat/completions", stream=True, timeout=120,
                         json={**CHAT, "messages": [{"role": "user", "content": topic + "Now the boats."}],
                               "max_tokens": 400, "ignore_eos": True, "stream": True})
    assert busy.status_code == 200 and busy.headers["X-Mnemo-Instance"] == holder
    history = [{"role": "user", "content": topic + "Start with the lanterns."},
               {"role": "assistant", "content": first.json()["choices"][0]["message"]["content"]},
               {"role": "user", "content": "And the music?"}]
    second = chat(router.url, history)
    assert second.headers["X-Mnemo-Instance"] != holder
    assert read_metrics(router.url)["mnemo_router_kv_pushes_total"] == 1
    assert second.json()["usage"]["prompt_tokens_details"]["cached_tokens_host"] > 0
    # The client of the long request leaves mid-stream: it no longer counts against its instance.
    busy.close()
    key = f'mnemo_router_in_flight{{instance="{holder}"}}'
    wait_for(lambda: read_metrics(router.url).get(key) == 0, 15, 0.1, "the abandoned stream to be let go")


def test_failed_kv_pushes_are_reported_and_change_nothing(cluster):
    a, b = cluster["instances"]
    request = {**CHAT, "messages": [{"role": "user", "content": "Describe a lighthouse keeper's day, hour by hour, from "
                                                                "dawn to night: the lamp, the stairs, the logbook."}]}
    chat(a.url, request["messages"])
    closed = requests.post(a.url + "/v1/internal/kv_push", headers=UNSIGNED_PEER,
                           json={"target": f"127.0.0.1:{free_port()}", "api": "chat", "request": request}, timeout=60)
    assert closed.status_code == 502, closed.text
    assert "kv_transfer_failed" in closed.text
    bad = requests.post(a.url + "/v1/internal/kv_push", headers=UNSIGNED_PEER, json={"target": transport_of(b)}, timeout=10)
    assert bad.status_code == 400
    # Nothing cached elsewhere: another tenant's push finds no KV of its own to send.
    other = requests.post(a.url + "/v1/internal/kv_push", headers={"X-Mnemo-Peer": "v0;someone-else"},
                          json={"target": transport_of(b), "api": "chat", "request": request}, timeout=60)
    assert other.status_code == 200 and other.json()["chunks"] == 0


def test_a_client_that_leaves_the_router_cancels_its_whole_request_on_the_instance(cluster):
    """A non-streamed request relayed by the router: its client goes while the instance computes
    the whole reply; the router stops its upstream request, and the instance cancels it."""
    running = lambda: sum(read_metrics(i.url)["mnemo_running_sequences"] for i in cluster["instances"])  # noqa: E731
    cancelled = lambda: sum(read_metrics(i.url)["mnemo_requests_cancelled_total"] for i in cluster["instances"])  # noqa: E731
    before = cancelled()
    host, port = cluster["router"].url.split("://", 1)[1].split(":")
    body = json.dumps({"model": "m", "prompt": "Once upon a time", "max_tokens": 3000, "ignore_eos": True}).encode()
    s = socket.create_connection((host, int(port)), timeout=10)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % len(body) + body)
    wait_for(lambda: running() >= 1, 30, 0.05, "the request to run on an instance")
    s.close()
    wait_for(lambda: running() == 0, 5, 0.05, "the instance to cancel the request its client left")
    assert cancelled() == before + 1


def test_a_killed_instance_stops_getting_requests_within_its_lease(cluster):
    router = cluster["router"]
    victim = cluster["instances"][1]
    victim.kill()  # SIGKILL: no goodbye, the lease must expire (TTL 3 s)
    killed_at = time.monotonic()
    wait_for(lambda: read_metrics(router.url).get("mnemo_router_instances") == 1, 10, 0.1, "the lease to expire")
    assert time.monotonic() - killed_at < 3 + 2.5
    for i in range(4):
        r = chat(router.url, [{"role": "user", "content": f"Count to {i + 3}."}])
        assert r.headers["X-Mnemo-Instance"] in "".join(cluster["instances"][0].stdout_lines)
