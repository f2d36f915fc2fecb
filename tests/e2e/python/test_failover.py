"""Fault tolerance (SPEC D7) on loopback: a real etcd, three `mnemo serve --cluster` instances on the
default model and `mnemo route --replicas 1` in front. Sixteen concurrent streamed requests run;
one instance is killed with SIGKILL mid-generation; every client stream completes with output
identical to a failure-free run, no token missing or repeated, the resumed requests finding
their KV replicated on the instance that took them over. Then an instance and the holder of its
replicas die together: the survivor recomputes what it lacks, and output is still identical.
Runs as its own CTest entry (failover_e2e)."""

from __future__ import annotations

import os
import signal
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from cluster_fixtures import etcd, instance_by_id  # noqa: F401  (etcd: a pytest fixture, by name)
from conftest import MnemoServer
from helpers import output_text, read_metrics, reference_model_path, response_stream_events, sse_events, wait_for

REQUESTS = 16
MAX_TOKENS = 192  # room for streams on a less loaded instance (or kept drafts) to run ahead of the kill
KILL_AFTER_TOKENS = 32  # streamed to each of the victims' clients before they die: past a chunk boundary

TOPICS = ["a lighthouse keeper", "a mountain village", "an old violin", "a forgotten library", "a desert caravan",
          "a winter market", "a clockmaker's shop", "a river ferry", "a night train", "a beekeeper's garden",
          "a harbour at dawn", "a chess tournament", "a glass workshop", "a rainy bookshop", "a tea plantation",
          "a circus in autumn", "a lost kite", "an abandoned observatory"]


@pytest.fixture(scope="module")
def cluster(etcd, mnemo_bin):  # noqa: F811  (the etcd fixture)
    name = f"f{os.getpid()}"
    started: list[MnemoServer] = []

    def start_instance() -> MnemoServer:
        s = MnemoServer([mnemo_bin, "serve", "--model", reference_model_path(), "--host", "127.0.0.1", "--port", "0", "--state-dir",
                         tempfile.mkdtemp(prefix="mnemo-failover-"), "--cluster", etcd, "--cluster-name", name,
                         "--kv-tokens", "16384", "--model-name", "m", "--threads", "1"])
        started.append(s)
        return s.start()

    instances = [start_instance() for _ in range(3)]
    router = MnemoServer([mnemo_bin, "route", "--cluster", etcd, "--cluster-name", name, "--port", "0", "--replicas", "1"])
    started.append(router)
    router.start()
    wait_for(lambda: read_metrics(router.url).get("mnemo_router_instances") == 3, 15, 0.1, "three instances in the view")
    yield {"instances": instances, "router": router, "start_instance": start_instance}
    for s in started:
        if s.proc is not None and s.proc.poll() is None:
            s.terminate()


def request_body(topic: str, seed: int) -> dict:
    return {"model": "m", "messages": [{"role": "user", "content": f"Write a short story about {topic}."}],
            "max_tokens": MAX_TOKENS, "ignore_eos": True, "temperature": 0.8, "seed": seed, "stream": True,
            "stream_options": {"include_usage": True}}


class Stream:
    """One streamed request through the router, read on its own thread."""

    def __init__(self, url: str, body: dict):
        self.url, self.body = url, body
        self.instance = ""
        self.replica = ""  # the instance holding its KV replica
        self.text = ""
        self.chunks = 0  # content chunks received
        self.usage: dict = {}
        self.error = ""
        self.started = threading.Event()

    def run(self) -> "Stream":
        try:
            with requests.post(self.url + "/v1/chat/completions", json=self.body, stream=True, timeout=300) as r:
                self.instance = r.headers.get("X-Mnemo-Instance", "")
                self.replica = r.headers.get("X-Mnemo-Replica", "")
                self.started.set()
                ids, roles, finishes = set(), 0, 0
                for event in sse_events(r):
                    if event == "[DONE]":
                        break
                    assert "mnemo_token" not in str(event), "the router must strip its token field"
                    ids.add(event["id"])
                    if event.get("usage"):
                        self.usage = event["usage"]
                    for choice in event["choices"]:
                        delta = choice.get("delta", {})
                        roles += "role" in delta
                        if delta.get("content"):
                            self.text += delta["content"]
                            self.chunks += 1
                        finishes += choice.get("finish_reason") is not None
                assert len(ids) == 1, f"one stream id expected, got {ids}"
                assert roles == 1 and finishes == 1, (roles, finishes)
        except Exception as e:  # noqa: BLE001  (reported by the test)
            self.error = repr(e)
            self.started.set()
        return self

    def resumed_details(self) -> dict:
        """The usage's prompt details: resumed_tokens among them when the router resumed it."""
        return self.usage.get("prompt_tokens_details", {})


def run_all(url: str, bodies: list[dict], on_progress=None, stream_type=None) -> list[Stream]:
    """Runs every body as a stream (a Stream, or `stream_type`) at once; on_progress(streams) runs
    on this thread while they do."""
    streams = [(stream_type or Stream)(url, b) for b in bodies]
    with ThreadPoolExecutor(len(streams)) as pool:
        futures = [pool.submit(s.run) for s in streams]
        if on_progress is not None:
            on_progress(streams)
        for f in futures:
            f.result()
    return streams


def busiest_instance(streams: list[Stream]) -> list[str]:
    """victims_of for kill_when_streaming: the instance running the most streams."""
    counts: dict[str, int] = {}
    for s in streams:
        counts[s.instance] = counts.get(s.instance, 0) + 1
    return [max(counts, key=counts.get)]


def kill_when_streaming(cluster, victims_of, hang: bool = False) -> callable:
    """on_progress for run_all: once every stream on the chosen instances has KILL_AFTER_TOKENS
    chunks, SIGKILL them (hang: SIGSTOP them, so their connections stay open)."""
    state = {}

    def on_progress(streams: list[Stream]):
        for s in streams:
            assert s.started.wait(120), "a stream never started"
        victims = victims_of(streams)
        state["victims"] = victims
        on_victims = [s for s in streams if s.instance in victims]
        assert on_victims, "no stream went to the chosen instances"
        wait_for(lambda: all(s.chunks >= KILL_AFTER_TOKENS or s.error for s in on_victims), 240, 0.02,
                 "the doomed instances' streams to be under way")
        # Kept drafts let a repetitive stream run far ahead of the others: those that finished
        # before the kill are not resumed, but at least one must be cut off mid-stream.
        assert any(s.chunks < MAX_TOKENS for s in on_victims), "every stream finished before the kill: raise MAX_TOKENS"
        for v in victims:
            if hang:
                instance_by_id(cluster, v).proc.send_signal(signal.SIGSTOP)
            else:
                instance_by_id(cluster, v).kill()
        state["victim_streams"] = on_victims

    return on_progress, state


def resumed_streams(state) -> list[Stream]:
    """The victims' streams the router resumed elsewhere (their usage says how many tokens they had
    delivered); a victim's stream that finished before the kill has none."""
    resumed = [s for s in state["victim_streams"] if "resumed_tokens" in s.resumed_details()]
    assert resumed, "no stream was cut off by the kill"
    return resumed


def test_killed_instance_streams_resume_on_the_replica_identically(cluster):
    router = cluster["router"]
    bodies = [request_body(TOPICS[i], seed=100 + i) for i in range(REQUESTS)]

    on_progress, state = kill_when_streaming(cluster, busiest_instance)
    before = read_metrics(router.url)
    failed_run = run_all(router.url, bodies, on_progress)
    after = read_metrics(router.url)
    assert all(not s.error for s in failed_run), [s.error for s in failed_run if s.error]
    resumed = resumed_streams(state)
    assert after["mnemo_router_resumed_streams_total"] - before.get("mnemo_router_resumed_streams_total", 0) == len(resumed)
    assert after.get("mnemo_router_failed_resumes_total", 0) == 0
    # The router knew, from the instance's stream, how far each replica had got.
    assert after["mnemo_router_resumed_replicated_tokens_total"] >= len(resumed) * 32  # a chunk each at least

    # The failure-free reference, on the instances left (sampling is seeded: output is the same).
    reference = run_all(router.url, bodies)
    assert all(not s.error for s in reference), [s.error for s in reference if s.error]
    for got, want in zip(failed_run, reference):
        assert got.text == want.text, f"request on {got.instance} differs after failover"
        assert got.usage["completion_tokens"] == MAX_TOKENS
    # The resumed requests found their KV replicated where they resumed: the prompt's, and what they
    # had generated but the last chunk (32 tokens) that had not filled yet.
    for s in resumed:
        details = s.usage["prompt_tokens_details"]
        assert s.replica and s.replica not in state["victims"]
        assert details["resumed_tokens"] >= KILL_AFTER_TOKENS, details
        assert details["resumed_cached_tokens"] >= details["resumed_tokens"] - 2 * 32, details
        assert details["cached_tokens"] >= s.usage["prompt_tokens"] - 32, details


def test_instance_and_replica_holder_killed_together_recompute_identically(cluster):
    router = cluster["router"]
    # The killed instance's lease expires (3 s), then a new one makes three again.
    wait_for(lambda: read_metrics(router.url).get("mnemo_router_instances") == 2, 15, 0.1, "the killed instance gone")
    cluster["instances"].append(cluster["start_instance"]())
    wait_for(lambda: read_metrics(router.url).get("mnemo_router_instances") == 3, 30, 0.1, "three instances in the view")
    bodies = [request_body(f"{TOPICS[i % len(TOPICS)]} and a second one", seed=200 + i) for i in range(REQUESTS)]
    assert sum(s.proc.poll() is None for s in cluster["instances"]) == 3

    def busiest_and_a_replica_holder_of_it(streams):
        busiest = busiest_instance(streams)[0]
        holder = next(s.replica for s in streams if s.instance == busiest)
        assert holder and holder != busiest
        return [busiest, holder]

    on_progress, state = kill_when_streaming(cluster, busiest_and_a_replica_holder_of_it)
    failed_run = run_all(router.url, bodies, on_progress)
    assert all(not s.error for s in failed_run), [s.error for s in failed_run if s.error]
    reference = run_all(router.url, bodies)
    assert all(not s.error for s in reference), [s.error for s in reference if s.error]
    for got, want in zip(failed_run, reference):
        assert got.text == want.text, f"request on {got.instance} differs after failover"
    # A resumed request whose replica holder died with it recomputed what it had generated; one
    # whose holder survived found it there.
    resumed = resumed_streams(state)
    lost = [s for s in resumed if s.replica in state["victims"]]
    kept = [s for s in resumed if s.replica not in state["victims"]]
    assert lost
    for s in lost:
        assert s.usage["prompt_tokens_details"]["resumed_cached_tokens"] == 0, s.usage
    for s in kept:
        details = s.usage["prompt_tokens_details"]
        assert details["resumed_cached_tokens"] >= details["resumed_tokens"] - 2 * 32, details


def test_a_hung_instance_streams_resume_once_its_lease_expires(cluster):
    """An instance that stops (SIGSTOP) keeps its connections open and says nothing: once its etcd
    lease expires, the router cuts its streams off and resumes them elsewhere, identically."""
    router = cluster["router"]
    restore_three_instances(cluster)
    bodies = [request_body(f"{TOPICS[i]} at night", seed=400 + i) for i in range(8)]

    on_progress, state = kill_when_streaming(cluster, busiest_instance, hang=True)
    before = read_metrics(router.url)
    try:
        hung_run = run_all(router.url, bodies, on_progress)
    finally:
        for v in state.get("victims", []):
            instance_by_id(cluster, v).kill()  # SIGKILL ends a stopped process too
    after = read_metrics(router.url)
    assert all(not s.error for s in hung_run), [s.error for s in hung_run if s.error]
    cut_off = len(resumed_streams(state))
    assert after["mnemo_router_expired_upstreams_total"] - before.get("mnemo_router_expired_upstreams_total", 0) == cut_off
    assert after["mnemo_router_resumed_streams_total"] - before["mnemo_router_resumed_streams_total"] == cut_off
    reference = run_all(router.url, bodies)
    for got, want in zip(hung_run, reference):
        assert not want.error, want.error
        assert got.text == want.text, f"request on {got.instance} differs after failover"
        assert got.usage["completion_tokens"] == MAX_TOKENS


def restore_three_instances(cluster) -> None:
    """Replaces the instances earlier tests killed, so each test starts with three."""
    router = cluster["router"]
    alive = [s for s in cluster["instances"] if s.proc.poll() is None]
    wait_for(lambda: read_metrics(router.url).get("mnemo_router_instances") == len(alive), 15, 0.1, "the killed ones gone")
    while len(alive) < 3:
        alive.append(cluster["start_instance"]())
        cluster["instances"].append(alive[-1])
    wait_for(lambda: read_metrics(router.url).get("mnemo_router_instances") == 3, 30, 0.1, "three instances in the view")


def test_a_finished_conversation_outlives_its_instance_on_its_replica(cluster):
    """Non-streamed turns are replicated too: once the turn's instance is gone, the next turn goes
    to the replica holder and finds the whole first turn (prompt and reply) cached there."""
    router = cluster["router"]
    restore_three_instances(cluster)
    messages = [{"role": "user", "content": "Describe, in a few sentences, the harbour of a small fishing town at dawn, "
                                            "with its boats, its gulls, the smell of the sea and the first light."}]
    first = requests.post(router.url + "/v1/chat/completions",
                          json={"model": "m", "messages": messages, "max_tokens": 48, "temperature": 0}, timeout=120)
    assert first.status_code == 200, first.text
    owner, holder = first.headers["X-Mnemo-Instance"], first.headers["X-Mnemo-Replica"]
    assert holder and holder != owner
    reply = first.json()["choices"][0]["message"]["content"]
    turn_tokens = first.json()["usage"]["prompt_tokens"] + first.json()["usage"]["completion_tokens"]
    holder_server = instance_by_id(cluster, holder)
    # The last increment (the reply's chunks, from the cache) lands just after the reply.
    wait_for(lambda: read_metrics(holder_server.url).get("mnemo_cache_imported_chunks_total", 0) >= (turn_tokens - 1) // 32,
             10, 0.05, "the replica to hold the whole turn")
    instance_by_id(cluster, owner).kill()
    wait_for(lambda: read_metrics(router.url).get("mnemo_router_instances") == 2, 15, 0.1, "the owner gone")
    second = requests.post(router.url + "/v1/chat/completions",
                           json={"model": "m", "max_tokens": 8, "temperature": 0,
                                 "messages": messages + [{"role": "assistant", "content": reply},
                                                         {"role": "user", "content": "And at dusk?"}]}, timeout=120)
    assert second.status_code == 200, second.text
    assert second.headers["X-Mnemo-Instance"] == holder  # where the conversation's KV is
    cached = second.json()["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached >= (turn_tokens - 1) // 32 * 32 - 32, (cached, turn_tokens)  # the reply's KV too (a re-rendered tail aside)


def respond(url: str, body: dict) -> requests.Response:
    r = requests.post(url + "/v1/responses", json={"model": "m", "temperature": 0, **body}, timeout=120)
    assert r.status_code == 200, r.text
    return r


def test_a_stored_conversation_outlives_its_instance_on_its_replica(cluster):
    """A stored Responses conversation is kept on the holder of its KV replica too (the stored
    turn copied there, the KV sent once the turn ends): once its instance is gone, the next turn
    goes to the holder, continues the conversation from its copy and finds its KV there; GET
    and DELETE reach the copy."""
    router = cluster["router"]
    restore_three_instances(cluster)
    question = ("Describe, in a few sentences, a mountain village in winter: its chimneys, the church bell, the "
                "children sledging and the baker's first loaves.")
    first = respond(router.url, {"input": question, "max_output_tokens": 40})
    owner, holder = first.headers["X-Mnemo-Instance"], first.headers["X-Mnemo-Replica"]
    assert holder and holder != owner
    assert read_metrics(router.url)["mnemo_router_stored_turn_copies_total"] >= 1
    rid = first.json()["id"]
    usage = first.json()["usage"]
    turn_tokens = usage["input_tokens"] + usage["output_tokens"]
    holder_server = instance_by_id(cluster, holder)
    # The turn's KV lands on the holder once the turn ends.
    wait_for(lambda: read_metrics(holder_server.url).get("mnemo_cache_imported_chunks_total", 0) >= (turn_tokens - 1) // 32,
             10, 0.05, "the replica to hold the whole turn")
    # The reference: the same conversation on the owner, before it dies (greedy, so the same).
    reference = respond(instance_by_id(cluster, owner).url,
                        {"input": "And in summer?", "max_output_tokens": 12, "previous_response_id": rid}).json()
    instance_by_id(cluster, owner).kill()
    wait_for(lambda: read_metrics(router.url).get("mnemo_router_instances") == 2, 15, 0.1, "the owner gone")
    stored = requests.get(router.url + f"/v1/responses/{rid}", timeout=30)
    assert stored.status_code == 200 and stored.json()["id"] == rid
    second = respond(router.url, {"input": "And in summer?", "max_output_tokens": 12, "previous_response_id": rid})
    assert second.headers["X-Mnemo-Instance"] == holder
    assert output_text(second.json()) == output_text(reference)
    cached = second.json()["usage"]["input_tokens_details"]["cached_tokens"]
    assert cached >= (turn_tokens - 1) // 32 * 32 - 32, (cached, turn_tokens)
    # Deleting the conversation's last turn through the router removes the copy too.
    assert requests.delete(router.url + f"/v1/responses/{second.json()['id']}", timeout=30).status_code == 200
    assert requests.get(holder_server.url + f"/v1/responses/{second.json()['id']}", timeout=30).status_code == 404


class ResponseStream(Stream):
    """One streamed Responses API turn through the router, read on its own thread."""

    def run(self) -> "ResponseStream":
        try:
            with requests.post(self.url + "/v1/responses", json=self.body, stream=True, timeout=300) as r:
                self.instance = r.headers.get("X-Mnemo-Instance", "")
                self.replica = r.headers.get("X-Mnemo-Replica", "")
                self.started.set()
                self.events = []
                for event in response_stream_events(r):
                    assert "mnemo_" not in str(event), "the router must strip its fields"
                    self.events.append(event)
                    if event["type"] == "response.output_text.delta":
                        self.text += event["delta"]
                        self.chunks += 1
        except Exception as e:  # noqa: BLE001  (reported by the test)
            self.error = repr(e)
            self.started.set()
        return self

    def resumed_details(self) -> dict:
        final = self.events[-1].get("response", {}) if self.events else {}
        return final.get("usage", {}).get("input_tokens_details", {})


def test_killed_instance_responses_streams_resume_as_the_same_responses(cluster):
    """Streamed, stored Responses turns are resumed too: each client sees one response (one id, one
    rising sequence of events, each opening event once), its text identical to a failure-free
    run, and the turn is stored under that id where it finished, so the conversation goes on."""
    router = cluster["router"]
    restore_three_instances(cluster)
    bodies = [{"model": "m", "input": f"Write a short story about {TOPICS[i]}.", "max_output_tokens": MAX_TOKENS,
               "ignore_eos": True, "temperature": 0.8, "seed": 300 + i, "stream": True} for i in range(8)]

    on_progress, state = kill_when_streaming(cluster, busiest_instance)
    before = read_metrics(router.url).get("mnemo_router_resumed_streams_total", 0)
    streams = run_all(router.url, bodies, on_progress, stream_type=ResponseStream)
    assert all(not s.error for s in streams), [s.error for s in streams if s.error]
    resumed = resumed_streams(state)
    assert read_metrics(router.url)["mnemo_router_resumed_streams_total"] - before == len(resumed)

    reference = [ResponseStream(router.url, b).run() for b in bodies]
    for got, want in zip(streams, reference):
        assert not want.error, want.error
        types = [e["type"] for e in got.events]
        assert [e["sequence_number"] for e in got.events] == list(range(len(got.events)))
        for opening in ("response.created", "response.in_progress", "response.output_item.added",
                        "response.content_part.added"):
            assert types.count(opening) == 1, (opening, types[:8])
        assert types[-1] == "response.incomplete"  # max_output_tokens reached
        final = got.events[-1]["response"]
        assert {e["response"]["id"] for e in got.events if "response" in e} == {final["id"]}
        assert {e["item_id"] for e in got.events if "item_id" in e} == {final["output"][0]["id"]}
        assert got.text == want.text == output_text(final), f"turn on {got.instance} differs after failover"
        assert final["usage"]["output_tokens"] == MAX_TOKENS
    for s in resumed:
        final = s.events[-1]["response"]
        details = final["usage"]["input_tokens_details"]
        assert details["resumed_tokens"] >= KILL_AFTER_TOKENS, details
        # Its KV followed it to the replica as it ran: only the last unfilled chunks are recomputed.
        assert s.replica and details["resumed_cached_tokens"] >= details["resumed_tokens"] - 2 * 32, details
        stored = requests.get(router.url + f"/v1/responses/{final['id']}", timeout=30)
        assert stored.status_code == 200 and output_text(stored.json()) == s.text
        follow = requests.post(router.url + "/v1/responses", json={"model": "m", "input": "Go on.", "max_output_tokens": 4,
                                                                   "previous_response_id": final["id"]}, timeout=120)
        assert follow.status_code == 200, follow.text


def test_a_restarted_instance_resumes_its_streams_from_its_own_disk(etcd, mnemo_bin):  # noqa: F811
    """The local disk replica (route --disk-replica): one instance, no other to fail over to. Its
    requests' KV goes to its own disk tier as their chunks fill; it is killed mid-generation and
    started again on the same state folder; the router, waiting for it, resumes every stream
    there, and the restarted instance finds their prompt and generated KV on its disk."""
    name = f"d{os.getpid()}"
    state = tempfile.mkdtemp(prefix="mnemo-disk-replica-")
    serve = [mnemo_bin, "serve", "--model", reference_model_path(), "--host", "127.0.0.1", "--port", "0", "--state-dir", state, "--cluster", etcd,
             "--cluster-name", name, "--kv-tokens", "16384", "--model-name", "m", "--threads", "1",
             "--kv-types", "f16"]  # resumed from the disk: identical only if the disk holds F16
    started = [MnemoServer(serve).start()]
    router = MnemoServer([mnemo_bin, "route", "--cluster", etcd, "--cluster-name", name, "--port", "0",
                          "--disk-replica", "true", "--resume-wait", "60"])
    started.append(router)
    try:
        router.start()
        wait_for(lambda: read_metrics(router.url).get("mnemo_router_instances") == 1, 15, 0.1, "the instance in the view")
        bodies = [request_body(f"{TOPICS[i]} by the sea", seed=500 + i) for i in range(4)]
        kill_after = 80  # tokens streamed: the prompt and two generated chunks filled at least

        def kill_and_restart(streams):
            for s in streams:
                assert s.started.wait(120), "a stream never started"
            wait_for(lambda: all(s.chunks >= kill_after or s.error for s in streams), 240, 0.02, "the streams under way")
            assert any(s.chunks < MAX_TOKENS for s in streams), "every stream finished before the kill"
            started[0].kill()
            started.append(MnemoServer(serve).start())  # the same state folder: its disk tier and state id

        before = read_metrics(router.url)
        failed_run = run_all(router.url, bodies, kill_and_restart)
        after = read_metrics(router.url)
        assert all(not s.error for s in failed_run), [s.error for s in failed_run if s.error]
        resumed = [s for s in failed_run if "resumed_tokens" in s.resumed_details()]
        assert resumed, "no stream was cut off by the kill"
        assert after["mnemo_router_resumed_streams_total"] - before.get("mnemo_router_resumed_streams_total", 0) == len(resumed)
        reference = run_all(router.url, bodies)
        for got, want in zip(failed_run, reference):
            assert not want.error, want.error
            assert got.text == want.text, "a stream differs after the restart"
            assert got.usage["completion_tokens"] == MAX_TOKENS
        for got in resumed:
            details = got.usage["prompt_tokens_details"]
            assert details["resumed_tokens"] >= kill_after, details
            # The KV of the prompt and of the generated tokens came from the disk: all but the
            # chunk that had not filled, and the last ones whose writes the kill may have cut
            # short (a slow disk lags a chunk or two; here they fill every ~3 s per stream).
            held = got.usage["prompt_tokens"] + details["resumed_tokens"]
            assert details["cached_tokens_disk"] >= held // 32 * 32 - 64, details
            assert details["cached_tokens"] + details["resumed_cached_tokens"] >= held // 32 * 32 - 64, details
            assert details["resumed_cached_tokens"] > 0, details
    finally:
        for s in started:
            if s.proc is not None and s.proc.poll() is None:
                s.terminate()
