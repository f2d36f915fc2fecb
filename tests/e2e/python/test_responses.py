"""The Responses API: stored conversations continued by previous_response_id, retrieval and
deletion, streaming events, and history that survives a kill -9 of the server."""

from __future__ import annotations

import json
import tempfile

import openai
import pytest
import requests

from helpers import output_text, peer_post, read_metrics, response_stream_events, wait_for



# The tests below that compare a turn after a restart with one without it keep KV exact in every
# tier: KV read back from a compressed disk (the default k4v8) is within the model's noise band, not
# identical (docs/kv.md).
EXACT_KV = ("--kv-types", "f16")


def response_events(response: requests.Response) -> list[dict]:
    return list(response_stream_events(response))


def create(url: str, **body) -> requests.Response:
    return requests.post(url + "/v1/responses", json=body, timeout=120)


@pytest.fixture(scope="module")
def state_server(start_server):
    state = tempfile.mkdtemp(prefix="mnemo-state-")
    return start_server("--state-dir", state), state


def test_string_input_gives_a_stored_response(state_server):
    server, _ = state_server
    r = create(server.url, input="Name three colours.", max_output_tokens=8, temperature=0)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "response"
    assert body["id"].startswith("resp_")
    assert body["status"] in ("completed", "incomplete")
    assert output_text(body)
    usage = body["usage"]
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    assert "cached_tokens" in usage["input_tokens_details"]


def test_input_items_list_a_turns_inputs(state_server):
    server, _ = state_server
    client = openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=60)
    inputs = [{"role": "user", "content": "First question."}, {"role": "assistant", "content": "An answer."},
              {"role": "user", "content": [{"type": "input_text", "text": "Second question."}]}]
    r = create(server.url, input=inputs, max_output_tokens=4, temperature=0)
    assert r.status_code == 200, r.text
    rid = r.json()["id"]
    page = requests.get(f"{server.url}/v1/responses/{rid}/input_items", params={"order": "asc"}, timeout=30)
    assert page.status_code == 200, page.text
    listed = page.json()
    assert listed["object"] == "list" and listed["has_more"] is False
    texts = [(item["role"], item["content"][0]["text"]) for item in listed["data"]]
    assert texts == [("user", "First question."), ("assistant", "An answer."), ("user", "Second question.")]
    assert listed["data"][1]["content"][0]["type"] == "output_text"
    assert listed["first_id"] == listed["data"][0]["id"] and listed["last_id"] == listed["data"][-1]["id"]
    # The official client's call: newest first by default, paged with limit and after.
    newest = client.responses.input_items.list(rid, limit=2)
    assert [item.content[0].text for item in newest.data] == ["Second question.", "An answer."]
    assert newest.has_more
    rest = client.responses.input_items.list(rid, limit=2, after=newest.data[-1].id)
    assert [item.content[0].text for item in rest.data] == ["First question."]
    for bad in ({"limit": 0}, {"order": "sideways"}, {"after": "msg_nope"}):
        assert requests.get(f"{server.url}/v1/responses/{rid}/input_items", params=bad, timeout=30).status_code == 400
    assert requests.get(f"{server.url}/v1/responses/resp_nope/input_items", timeout=30).status_code == 404
    assert requests.get(f"{server.url}/v1/responses/{rid}/other", timeout=30).status_code == 404
    client.close()


def test_max_output_tokens_makes_it_incomplete(state_server):
    server, _ = state_server
    body = create(server.url, input="Count to one hundred.", max_output_tokens=5, ignore_eos=True, temperature=0).json()
    assert body["status"] == "incomplete"
    assert body["incomplete_details"] == {"reason": "max_output_tokens"}
    assert body["usage"]["output_tokens"] == 5


def test_previous_response_id_continues_the_conversation_from_cache(state_server):
    server, _ = state_server
    first = create(server.url, input="Tell me about the sea and the ships that sail on it.",
                   max_output_tokens=24, ignore_eos=True, temperature=0).json()
    second = create(server.url, input="And the harbours?", previous_response_id=first["id"], max_output_tokens=8,
                    temperature=0).json()
    assert second["previous_response_id"] == first["id"]
    # The history (turn 1's input and output) is sent to the model again, from the store...
    assert second["usage"]["input_tokens"] > first["usage"]["input_tokens"] + first["usage"]["output_tokens"] - 2
    # ...and its KV comes from the prefix cache: at least the whole blocks of turn 1's prompt.
    assert second["usage"]["input_tokens_details"]["cached_tokens"] >= first["usage"]["input_tokens"] // 16 * 16 > 0


def test_instructions_are_not_inherited(state_server):
    server, _ = state_server
    first = create(server.url, input="Hello.", instructions="Answer in French.", max_output_tokens=4).json()
    assert first["instructions"] == "Answer in French."
    second = create(server.url, input="Again.", previous_response_id=first["id"], max_output_tokens=4).json()
    assert second["instructions"] is None
    # Without the system text, turn 2's prompt is shorter than turn 1's prompt plus its reply.
    with_instructions = create(server.url, input="Again.", previous_response_id=first["id"],
                               instructions="Answer in French.", max_output_tokens=4).json()
    assert with_instructions["usage"]["input_tokens"] > second["usage"]["input_tokens"]


def test_unknown_previous_response_is_404(state_server):
    server, _ = state_server
    r = create(server.url, input="hi", previous_response_id="resp_doesnotexist")
    assert r.status_code == 404
    assert r.json()["error"]["param"] == "previous_response_id"


def test_get_and_delete(state_server):
    server, _ = state_server
    body = create(server.url, input="Hello", max_output_tokens=3, temperature=0).json()
    got = requests.get(server.url + "/v1/responses/" + body["id"], timeout=30)
    assert got.status_code == 200
    assert got.json() == body
    deleted = requests.delete(server.url + "/v1/responses/" + body["id"], timeout=30)
    assert deleted.status_code == 200
    assert deleted.json()["deleted"] is True
    assert requests.get(server.url + "/v1/responses/" + body["id"], timeout=30).status_code == 404
    assert requests.delete(server.url + "/v1/responses/" + body["id"], timeout=30).status_code == 404


def test_delete_also_deletes_the_conversations_kv_but_not_earlier_turns(state_server):
    server, _ = state_server
    long_input = ("Describe a walk through an old town in the morning: the bakery, the market, the church bells, "
                  "the river, the bridges and the people who cross them on their way to work.")
    first = create(server.url, input=long_input, max_output_tokens=40, ignore_eos=True, temperature=0).json()
    second = create(server.url, input="What happens at noon there? Tell me about the lunch crowd and the shops.",
                    previous_response_id=first["id"], max_output_tokens=40, ignore_eos=True, temperature=0).json()
    before = metric(server.url, "cache_forgotten_chunks_total")
    assert requests.delete(server.url + "/v1/responses/" + second["id"], timeout=30).status_code == 200
    # The second turn's own chunks go (the engine applies the delete on its next step)...
    forgotten = wait_for(lambda: metric(server.url, "cache_forgotten_chunks_total") - before, timeout=10,
                         what="the deleted turn's chunks")
    turn_tokens = second["usage"]["input_tokens"] + second["usage"]["output_tokens"]
    kept_tokens = first["usage"]["input_tokens"] + first["usage"]["output_tokens"]
    assert 1 <= forgotten <= (turn_tokens - kept_tokens) // 32 + 2
    # ...while the first turn's stay: continuing it still hits the cache.
    again = create(server.url, input="And in the evening?", previous_response_id=first["id"], max_output_tokens=4,
                   temperature=0).json()
    assert again["usage"]["input_tokens_details"]["cached_tokens"] >= first["usage"]["input_tokens"] // 32 * 32 > 0


def test_cache_control_end_marks_the_conversations_own_chunks_and_keeps_them(state_server):
    server, _ = state_server
    long_input = ("Tell me about the lighthouse keeper's day on a small island: the lamp, the weather log, the supply "
                  "boat, the birds on the cliffs and the long evenings.")
    first = create(server.url, input=long_input, max_output_tokens=40, ignore_eos=True, temperature=0).json()
    before = metric(server.url, "cache_ended_chunks_total")
    last = create(server.url, input="Thanks, that is all.", previous_response_id=first["id"], max_output_tokens=8,
                  temperature=0, cache_control={"type": "end"}).json()
    ended = metric(server.url, "cache_ended_chunks_total") - before
    total_tokens = last["usage"]["input_tokens"] + last["usage"]["output_tokens"]
    assert 1 <= ended <= total_tokens // 32
    # Ended is not deleted: nothing pressed the cache, so continuing still hits it, and the new
    # turn takes the conversation back (its chunks are no longer ended).
    again = create(server.url, input="One more thing: the storms?", previous_response_id=last["id"],
                   max_output_tokens=4, temperature=0).json()
    assert again["usage"]["input_tokens_details"]["cached_tokens"] >= last["usage"]["input_tokens"] // 32 * 32 > 0
    # Over the server's --max-cache-ttl (3600 s by default) too.
    for value in ({"type": "persistent"}, "end", {"type": "end", "ttl": "5m"}, {"type": "ephemeral", "ttl": "2h"}):
        refused = create(server.url, input="Hello", max_output_tokens=2, cache_control=value)
        assert refused.status_code == 400
        assert refused.json()["error"]["param"] == "cache_control"
    chat = requests.post(server.url + "/v1/chat/completions", timeout=60,
                         json={"messages": [{"role": "user", "content": long_input}], "max_tokens": 4,
                               "cache_control": {"type": "end"}})
    assert chat.status_code == 200


def test_cache_control_ephemeral_pins_the_whole_conversation_for_its_ttl(state_server):
    server, _ = state_server
    long_input = ("Describe a day at a mountain weather station: the instruments, the morning readings, the radio "
                  "call to the valley, the snow on the mast and the night sky.")
    first = create(server.url, input=long_input, max_output_tokens=24, ignore_eos=True, temperature=0,
                   cache_control={"type": "ephemeral", "ttl": "10m"}).json()
    wait_for(lambda: metric(server.url, "cache_pinned_chunks") > 0, timeout=10, what="the pin")
    pinned = metric(server.url, "cache_pinned_chunks")
    total_tokens = first["usage"]["input_tokens"] + first["usage"]["output_tokens"]
    # The whole path the turn cached: every whole chunk of its prompt and reply (the last token's
    # KV is computed only by the next turn).
    assert total_tokens // 32 - 1 <= pinned <= total_tokens // 32
    assert metric(server.url, "cache_pinned_chunks_total") >= pinned
    # The next turn, pinned again, extends the pin over the longer path.
    second = create(server.url, input="And in winter?", previous_response_id=first["id"], max_output_tokens=8,
                    temperature=0, cache_control={"type": "ephemeral"}).json()
    assert second["usage"]["input_tokens_details"]["cached_tokens"] >= first["usage"]["input_tokens"] // 32 * 32 > 0
    assert metric(server.url, "cache_pinned_chunks") >= pinned
    # An end lifts the pin of the conversation's own chunks.
    create(server.url, input="Thanks.", previous_response_id=second["id"], max_output_tokens=2, temperature=0,
           cache_control={"type": "end"})
    wait_for(lambda: metric(server.url, "cache_pinned_chunks") < pinned, timeout=10, what="the end lifting the pin")


def test_store_false_is_not_retrievable(state_server):
    server, _ = state_server
    body = create(server.url, input="Hello", max_output_tokens=2, store=False).json()
    assert requests.get(server.url + "/v1/responses/" + body["id"], timeout=30).status_code == 404


def test_streaming_events_in_order(state_server):
    server, _ = state_server
    r = requests.post(server.url + "/v1/responses", json={"input": "Say hello.", "max_output_tokens": 6,
                                                          "temperature": 0, "stream": True}, stream=True, timeout=120)
    assert r.status_code == 200
    events = response_events(r)
    types = [e["type"] for e in events]
    assert types[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert types[-4:-1] == ["response.output_text.done", "response.content_part.done", "response.output_item.done"]
    assert types[-1] in ("response.completed", "response.incomplete")
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    deltas = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    done = next(e for e in events if e["type"] == "response.output_text.done")
    assert deltas == done["text"]
    final = events[-1]["response"]
    assert final["usage"]["output_tokens"] == 6
    assert output_text(final) == deltas


def test_a_resumed_stream_continues_as_the_same_response(state_server):
    """What a router sends when a turn's instance fails mid-stream (SPEC D7): the tokens the client
    got, and the response it was getting. The turn goes on as that response (same ids, the text
    so far in its final events), the rest of its tokens as an uninterrupted run's, and it is
    stored under the original id."""
    server, _ = state_server
    body = {"input": "Tell me about a lighthouse.", "max_output_tokens": 40, "ignore_eos": True, "temperature": 0.8,
            "seed": 7, "stream": True, "mnemo_report_tokens": True}
    whole = response_events(peer_post(server.url + "/v1/responses", body, stream=True, timeout=120))
    deltas = [e for e in whole if e["type"] == "response.output_text.delta"]
    assert len(deltas) == 40 and all(isinstance(e["mnemo_token"], int) for e in deltas)  # every token, text or not
    final = whole[-1]["response"]
    cut = 15
    told = {"id": "resp_" + "5" * 32, "message_id": "msg_" + "6" * 32, "created_at": final["created_at"],
            "text": "".join(e["delta"] for e in deltas[:cut])}
    resumed_body = {**body, "mnemo_resume_tokens": [e["mnemo_token"] for e in deltas[:cut]], "mnemo_resume_response": told}

    # A stored response is never replaced by a resumed one; a malformed one is refused.
    taken = peer_post(server.url + "/v1/responses", {**resumed_body, "mnemo_resume_response": {**told, "id": final["id"]}},
                      timeout=120)
    assert taken.status_code == 409, taken.text
    for bad in ({**told, "id": "x"}, {**told, "message_id": 3}, {**told, "created_at": -1}, "resp_1"):
        r = peer_post(server.url + "/v1/responses", {**resumed_body, "mnemo_resume_response": bad}, timeout=120)
        assert r.status_code == 400 and r.json()["error"]["param"] == "mnemo_resume_response", r.text

    events = response_events(peer_post(server.url + "/v1/responses", resumed_body, stream=True, timeout=120))
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    rest = [e for e in events if e["type"] == "response.output_text.delta"]
    assert [e["mnemo_token"] for e in rest] == [e["mnemo_token"] for e in deltas[cut:]]
    assert told["text"] + "".join(e["delta"] for e in rest) == output_text(final)
    assert events[0]["response"]["id"] == told["id"] and events[0]["response"]["created_at"] == told["created_at"]
    assert all(e["item_id"] == told["message_id"] for e in rest)
    done = next(e for e in events if e["type"] == "response.output_text.done")
    assert done["text"] == output_text(final)
    resumed_final = events[-1]["response"]
    assert resumed_final["id"] == told["id"] and output_text(resumed_final) == output_text(final)
    assert resumed_final["usage"]["output_tokens"] == 40
    stored = requests.get(server.url + f"/v1/responses/{told['id']}", timeout=30)
    assert stored.status_code == 200 and output_text(stored.json()) == output_text(final)


def test_openai_client(state_server):
    import openai

    server, _ = state_server
    with openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=120) as client:
        first = client.responses.create(model="gemma-3-270m-q4_k_m", input="Hi there", max_output_tokens=4)
        second = client.responses.create(model="gemma-3-270m-q4_k_m", input="Again", previous_response_id=first.id,
                                         max_output_tokens=4)
        assert second.output_text is not None
        assert client.responses.retrieve(second.id).id == second.id


def test_history_survives_kill_9(start_server):
    """A conversation continues after the server is killed and restarted on the same state."""
    state = tempfile.mkdtemp(prefix="mnemo-restart-")
    a = start_server("--state-dir", state, *EXACT_KV)
    first = create(a.url, input="Describe a mountain village in winter.", max_output_tokens=16, ignore_eos=True,
                   temperature=0).json()
    expected = create(a.url, input="What do people eat there?", previous_response_id=first["id"],
                      max_output_tokens=8, ignore_eos=True, temperature=0, store=False).json()
    a.kill()  # SIGKILL: no shutdown path runs
    b = start_server("--state-dir", state, *EXACT_KV)
    again = create(b.url, input="What do people eat there?", previous_response_id=first["id"],
                   max_output_tokens=8, ignore_eos=True, temperature=0, store=False)
    assert again.status_code == 200, again.text
    body = again.json()
    assert output_text(body) == output_text(expected)
    assert body["usage"]["input_tokens"] == expected["usage"]["input_tokens"]


def metric(url: str, name: str) -> float:
    return read_metrics(url)[f"mnemo_{name}"]


def wait_for_disk_writes(url: str) -> None:
    wait_for(lambda: metric(url, "disk_writes_queued") == 0, timeout=60, what="disk writes")


THREE_TURNS = ["Describe a mountain village in winter.", "What do people eat there?", "And in summer?"]
FOURTH = "Which season would you visit, and why?"


def run_turns(url: str, turns: list[str], previous: str | None = None) -> str:
    for text in turns:
        body = dict(input=text, max_output_tokens=48, ignore_eos=True, temperature=0)
        if previous:
            body["previous_response_id"] = previous
        r = create(url, **body)
        assert r.status_code == 200, r.text
        previous = r.json()["id"]
    return previous


def fourth_turn(url: str, previous: str) -> dict:
    r = create(url, input=FOURTH, previous_response_id=previous, max_output_tokens=16, ignore_eos=True, temperature=0,
               store=False)
    assert r.status_code == 200, r.text
    return r.json()


@pytest.fixture(scope="module")
def no_restart_fourth_turn(start_server) -> dict:
    server = start_server("--disk-cache-bytes", "0", *EXACT_KV)
    return fourth_turn(server.url, run_turns(server.url, THREE_TURNS))


def test_kv_of_a_conversation_survives_kill_9_in_the_disk_tier(start_server, no_restart_fourth_turn):
    """3 turns, kill -9, restart: the 4th turn reads its history's KV from the disk tier and its
    output equals the run without a restart."""
    state = tempfile.mkdtemp(prefix="mnemo-disk-")
    a = start_server("--state-dir", state, *EXACT_KV)
    previous = run_turns(a.url, THREE_TURNS)
    wait_for_disk_writes(a.url)
    a.kill()
    b = start_server("--state-dir", state, *EXACT_KV)
    assert metric(b.url, "disk_chunks_cached") > 0
    body = fourth_turn(b.url, previous)
    details = body["usage"]["input_tokens_details"]
    assert details["cached_tokens"] > 0, details
    assert details["cached_tokens_disk"] > 0, details
    assert details["cached_tokens_disk"] + details["cached_tokens_device"] + details["cached_tokens_host"] == \
        details["cached_tokens"]
    assert output_text(body) == output_text(no_restart_fourth_turn)
    assert metric(b.url, "kv_bytes_disk_to_device_total") > 0


def test_corrupted_or_truncated_extents_are_recomputed_never_served(start_server, no_restart_fourth_turn):
    import os
    state = tempfile.mkdtemp(prefix="mnemo-disk-corrupt-")
    a = start_server("--state-dir", state, *EXACT_KV)
    previous = run_turns(a.url, THREE_TURNS)
    wait_for_disk_writes(a.url)
    a.kill()
    (folder,) = os.listdir(os.path.join(state, "kv"))  # one model: one fingerprint's folder
    kv_dir = os.path.join(state, "kv", folder)
    extents = sorted(os.path.join(kv_dir, f) for f in os.listdir(kv_dir) if f.endswith(".kv"))
    assert len(extents) >= 4
    # Damage every other extent's payload (the header stays valid: found at start-up, caught on
    # read) and truncate one.
    for path in extents[::2]:
        with open(path, "r+b") as f:
            f.seek(-100, os.SEEK_END)
            byte = f.read(1)
            f.seek(-100, os.SEEK_END)
            f.write(bytes([byte[0] ^ 0xFF]))
    with open(extents[1], "r+b") as f:
        f.truncate(os.path.getsize(extents[1]) // 2)
    b = start_server("--state-dir", state, *EXACT_KV)
    body = fourth_turn(b.url, previous)
    assert output_text(body) == output_text(no_restart_fourth_turn)
    assert metric(b.url, "cache_disk_corrupt_chunks_total") > 0
    assert body["usage"]["input_tokens_details"]["recomputed_tokens"] > 0 or \
        body["usage"]["input_tokens_details"]["cached_tokens"] == 0


def test_an_imported_turn_is_stored_and_continued_and_bad_imports_change_nothing(state_server, start_server):
    # A router copies a stored turn to the holder of its KV replica: the holder stores it as its
    # own, and a next turn continues from it exactly as on the instance that ran it.
    server, _ = state_server
    holder = start_server()
    first = create(server.url, input="Name a river in France.", max_output_tokens=8, temperature=0).json()
    url = holder.url + "/v1/internal/responses_import"
    request = {"input": "Name a river in France.", "max_output_tokens": 8, "temperature": 0}
    bad = [b"{not json", json.dumps({"request": request}).encode(),
           json.dumps({"request": request, "response": {"id": "x", "output": []}}).encode(),
           json.dumps({"request": request, "response": {"id": "resp_1"}}).encode(),
           json.dumps({"request": {"input": 7}, "response": first}).encode()]
    for body in bad:
        r = peer_post(url, data=body, timeout=30)
        assert r.status_code == 400, (body, r.text)
        assert requests.get(holder.url + f"/v1/responses/{first['id']}", timeout=30).status_code == 404
    # A turn continuing one the holder lacks: refused (it could not be continued there).
    orphan = {**request, "previous_response_id": "resp_unknown"}
    r = peer_post(url, {"request": orphan, "response": first}, timeout=30)
    assert r.status_code == 404, r.text
    r = peer_post(url, {"request": request, "response": first}, timeout=30)
    assert r.status_code == 200, r.text
    assert requests.get(holder.url + f"/v1/responses/{first['id']}", timeout=30).json() == first
    follow = {"input": "How long is it?", "max_output_tokens": 8, "temperature": 0, "previous_response_id": first["id"]}
    on_holder = create(holder.url, **follow).json()
    on_owner = create(server.url, **follow).json()
    assert output_text(on_holder) == output_text(on_owner)
    assert on_holder["usage"]["input_tokens"] == on_owner["usage"]["input_tokens"]


def test_the_default_disk_holds_k4v8_copies_and_serves_them_after_a_restart(start_server):
    """The default --kv-types keeps the disk tier in k4v8: its extents take 0.42 of F16's bytes,
    and after kill -9 the next turn reads them back (within the model's noise band, so only its
    shape is asserted here; tests/model/kv_type_fidelity_test.cpp measures the band)."""
    import os
    state = tempfile.mkdtemp(prefix="mnemo-disk-k4v8-")
    a = start_server("--state-dir", state)
    previous = run_turns(a.url, THREE_TURNS)
    wait_for_disk_writes(a.url)
    a.kill()
    (folder,) = os.listdir(os.path.join(state, "kv"))
    kv_dir = os.path.join(state, "kv", folder)
    sizes = [os.path.getsize(os.path.join(kv_dir, f)) for f in os.listdir(kv_dir) if f.endswith(".kv")]
    # Gemma 3 270M, 32-token chunks: 18 layers x 1 KV head x (256 + 256) x 32 tokens = 294,912
    # elements, 589,824 bytes of F16; k4v8 holds them in 18 x 13,824 = 248,832 (a compact chunk,
    # 3 global layers: 41,472); a header adds a few hundred bytes.
    whole, compact, f16 = 248_832, 41_472, 589_824
    assert sizes and max(sizes) < f16, sizes
    assert all(whole <= s < whole + 4096 or compact <= s < compact + 4096 for s in sizes), sizes
    b = start_server("--state-dir", state)
    body = fourth_turn(b.url, previous)
    details = body["usage"]["input_tokens_details"]
    assert details["cached_tokens_disk"] > 0, details
    assert body["usage"]["output_tokens"] == 16 and output_text(body).strip()
    assert metric(b.url, "kv_bytes_disk_to_device_total") > 0
