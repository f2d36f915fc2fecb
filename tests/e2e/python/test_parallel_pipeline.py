"""Pipeline parallelism end to end (SPEC D6): `mnemo serve --pipeline-stage` as the coordinator of
two `mnemo worker` stages, each holding half of the model's layers, over signed UCX links.

Through the OpenAI API, greedy output of Gemma 3 270M and SmolLM2 equals one instance's token
for token over multi-turn conversations whose later turns hit the prefix cache (the KV of those
turns lives on the stages), in streams and in concurrent requests (several microbatches a pass).
A stage set up for another model refuses, so the coordinator does not start. A stage killed with
SIGKILL mid-stream is replaced by a spare (given by flag, or a worker registered in the cluster's
etcd) whose KV is restored from the replica the next stage keeps, and every stream completes
with the text it would have had without the failure; without a spare, the requests that need
the lost stage fail at once instead of hanging. Stages and spares can come from etcd alone.
The cache's host and disk tiers work across the stages as on one instance: history pushed out of
a small device pool comes back from the host with the same output, and after the coordinator
restarts, from its disk (and a stored response's conversation goes on).
"""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest
import requests

from cluster_fixtures import etcd  # noqa: F401 (a fixture)
from helpers import CLUSTER_SECRET, chat_model_path, output_text, read_metrics, reference_model_path, wait_for

LISTENING = re.compile(r"listening at (\S+) for a coordinator")
TURNS = [
    "Name three colours of the rainbow.",
    "Which of them is the warmest? Answer in one sentence.",
    "Now name a fruit of that colour.",
]
MAX_TOKENS = 40


@pytest.fixture(scope="module")
def secret_file():
    path = os.path.join(tempfile.mkdtemp(prefix="mnemo-e2e-pipeline-"), "secret")
    with open(path, "w") as f:
        f.write(CLUSTER_SECRET + "\n")
    return path


class Worker:
    """One `mnemo worker` process; `endpoint` is the host:port it printed."""

    def __init__(self, mnemo_bin: str, model: str, secret_file: str, *extra: str):
        self.proc = subprocess.Popen(
            [mnemo_bin, "worker", "--model", model, "--port", "0", "-t", "1", "--cluster-secret-file", secret_file, *extra],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1, stdin=subprocess.DEVNULL)
        self.lines: list[str] = []
        found: queue.Queue[str | None] = queue.Queue()

        def pump():
            assert self.proc.stdout is not None
            for line in self.proc.stdout:
                self.lines.append(line)
                match = LISTENING.search(line)
                if match:
                    found.put(match.group(1))
            found.put(None)

        threading.Thread(target=pump, daemon=True).start()
        try:
            endpoint = found.get(timeout=60)
        except queue.Empty:
            endpoint = None
        if endpoint is None:
            self.stop()
            pytest.fail("mnemo worker did not start:\n" + "".join(self.lines))
        self.endpoint: str = endpoint

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


@pytest.fixture(scope="module")
def workers(mnemo_bin, secret_file):
    started: list[Worker] = []

    def start(model: str, *extra: str) -> Worker:
        w = Worker(mnemo_bin, model, secret_file, *extra)
        started.append(w)
        return w

    yield start
    for w in started:
        w.stop()


def coordinator_args(model: str, stages: list[Worker], secret_file: str, *extra: str) -> list[str]:
    args = ["--model", model, "-t", "1", "--cluster-secret-file", secret_file, *extra]
    for w in stages:
        args += ["--pipeline-stage", w.endpoint]
    return args


@pytest.fixture(scope="module", params=["gemma", "smollm2"])
def pair(request, start_server, workers, secret_file):
    """(pipeline coordinator over two stages, one instance) on one model."""
    model = reference_model_path() if request.param == "gemma" else chat_model_path()
    stages = [workers(model), workers(model)]
    pipeline = start_server(*coordinator_args(model, stages, secret_file))
    single = start_server("--model", model, "-t", "1", "--cluster-secret-file", secret_file)
    return pipeline, single, stages


def chat(server, messages, stream=False, max_tokens=MAX_TOKENS):
    model = served_model(server)
    with openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=300) as c:
        if not stream:
            r = c.chat.completions.create(model=model, messages=messages, temperature=0, max_tokens=max_tokens)
            return r.choices[0].message.content, r.usage
        text, usage = "", None
        for chunk in c.chat.completions.create(model=model, messages=messages, temperature=0, max_tokens=max_tokens,
                                               stream=True, stream_options={"include_usage": True}):
            if chunk.choices and chunk.choices[0].delta.content:
                text += chunk.choices[0].delta.content
            if chunk.usage is not None:
                usage = chunk.usage
        return text, usage


PIPELINE_LOG = re.compile(r"pipeline stage (\d) at \S+: layers \[(\d+), (\d+)\)")


def served_model(server) -> str:
    return requests.get(server.base_url + "/models", timeout=10).json()["data"][0]["id"]


def test_the_stages_split_the_layers(pair):
    pipeline, _, stages = pair
    splits = [PIPELINE_LOG.search(line) for line in pipeline.stdout_lines]
    ranges = [(int(m.group(2)), int(m.group(3))) for m in splits if m]
    assert len(ranges) == 2 and ranges[0][0] == 0 and ranges[0][1] == ranges[1][0] and ranges[1][1] > ranges[1][0]
    for w in stages:
        assert any("stage of layers" in line for line in w.lines), "".join(w.lines)


def test_multi_turn_greedy_output_equals_one_instance_with_cache_hits(pair):
    pipeline, single, _ = pair
    history: list[dict] = []
    for i, turn in enumerate(TURNS):
        history.append({"role": "user", "content": turn})
        got, got_usage = chat(pipeline, history, stream=(i == 1))
        want, want_usage = chat(single, history)
        assert got == want, f"turn {i}"
        assert got_usage.completion_tokens == want_usage.completion_tokens
        assert got_usage.prompt_tokens == want_usage.prompt_tokens
        if i > 0:  # the earlier turns' KV, kept on the stages, is reused
            assert got_usage.prompt_tokens_details.cached_tokens > 0, f"turn {i}: {got_usage}"
        history.append({"role": "assistant", "content": got})


def test_concurrent_requests_in_microbatches_equal_one_instance(pair):
    pipeline, single, stages = pair
    questions = [[{"role": "user", "content": f"Write one sentence about the number {n}."}] for n in (3, 17, 42, 99)]
    with ThreadPoolExecutor(len(questions)) as pool:
        got = list(pool.map(lambda m: chat(pipeline, m)[0], questions))
    want = [chat(single, m)[0] for m in questions]
    assert got == want


def test_a_stage_of_another_model_refuses_and_the_coordinator_does_not_start(mnemo_bin, workers, secret_file):
    stage = workers(chat_model_path())
    args = [mnemo_bin, "serve", "--host", "127.0.0.1", "--port", "0", "--state-dir", tempfile.mkdtemp(),
            *coordinator_args(reference_model_path(), [stage], secret_file)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "another model" in done.stderr, done.stderr


def test_a_killed_stage_fails_requests_at_once_instead_of_hanging(start_server, workers, secret_file):
    model = chat_model_path()
    stages = [workers(model), workers(model)]
    pipeline = start_server(*coordinator_args(model, stages, secret_file, "--pipeline-step-timeout", "20"))
    model_id = served_model(pipeline)
    body = {"model": model_id, "messages": [{"role": "user", "content": "Hello"}], "temperature": 0, "max_tokens": 8}
    assert requests.post(pipeline.base_url + "/chat/completions", json=body, timeout=120).status_code == 200
    stages[1].proc.kill()
    stages[1].proc.wait(timeout=10)
    started = time.monotonic()
    r = requests.post(pipeline.base_url + "/chat/completions", json=body, timeout=120)
    assert time.monotonic() - started < 30
    assert r.status_code >= 500 or r.json()["choices"][0]["finish_reason"] not in ("stop", "length"), r.text
    assert requests.get(pipeline.url + "/health", timeout=10).status_code == 200  # the coordinator lives on


@pytest.fixture(scope="module")
def chat_single(start_server, secret_file):
    return start_server("--model", chat_model_path(), "-t", "1", "--cluster-secret-file", secret_file)


def kill_mid_stream_and_compare(pipeline, single, victim: Worker, spare: Worker, lost: int) -> None:
    """Two concurrent greedy streams; `victim` is SIGKILLed after the first has 12 chunks. Both
    must complete with the single instance's text, and `spare` must have taken stage `lost`."""
    prompts = [[{"role": "user", "content": "Tell me a short story about a lighthouse keeper."}],
               [{"role": "user", "content": "Explain how rain forms, step by step."}]]
    want = [chat(single, p, max_tokens=96)[0] for p in prompts]
    model_id = served_model(pipeline)
    killed = threading.Event()
    results: list[str | None] = [None, None]

    def stream(i: int):
        with openai.OpenAI(base_url=pipeline.base_url, api_key="unused", max_retries=0, timeout=300) as c:
            text, chunks = "", 0
            for chunk in c.chat.completions.create(model=model_id, messages=prompts[i], temperature=0, max_tokens=96,
                                                   stream=True):
                if chunk.choices and chunk.choices[0].delta.content:
                    text += chunk.choices[0].delta.content
                    chunks += 1
                    if i == 0 and chunks == 12 and not killed.is_set():
                        victim.proc.kill()  # SIGKILL, mid-stream
                        killed.set()
            results[i] = text

    threads = [threading.Thread(target=stream, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert killed.is_set()
    assert results == want
    log = open(pipeline.stderr_path).read()
    assert f"worker {lost} (" in log and f"replaced by {spare.endpoint}" in log, pipeline.log_tail()
    assert any("stage of layers" in line for line in spare.lines)


@pytest.mark.parametrize("lost", [0, 1])
def test_a_stage_killed_mid_stream_is_replaced_and_every_stream_completes_unchanged(start_server, workers, secret_file,
                                                                                     chat_single, lost):
    model = chat_model_path()
    stages = [workers(model), workers(model)]
    spare = workers(model)
    pipeline = start_server(*coordinator_args(model, stages, secret_file, "--pipeline-spare", spare.endpoint,
                                              "--pipeline-step-timeout", "20"))
    kill_mid_stream_and_compare(pipeline, chat_single, stages[lost], spare, lost)


def test_stages_and_their_spare_come_from_the_clusters_membership(start_server, workers, secret_file, chat_single, etcd):
    """Three workers register in etcd; the coordinator takes two as its stages (--pipeline-stages
    2) and the third as the spare that replaces a stage killed mid-stream."""
    model = chat_model_path()
    registered = [workers(model, "--cluster", etcd, "--cluster-name", "pipe") for _ in range(3)]
    pipeline = start_server(*coordinator_args(model, [], secret_file, "--pipeline-stages", "2", "--pipeline-cluster", etcd,
                                              "--cluster-name", "pipe", "--pipeline-step-timeout", "20"))
    stage_endpoints = [m.group(1) for m in (re.search(r"pipeline stage \d at (\S+):", line) for line in pipeline.stdout_lines) if m]
    assert len(stage_endpoints) == 2, pipeline.log_tail()
    by_endpoint = {w.endpoint: w for w in registered}
    spare = next(w for w in registered if w.endpoint not in stage_endpoints)
    kill_mid_stream_and_compare(pipeline, chat_single, by_endpoint[stage_endpoints[1]], spare, 1)


def test_a_worker_off_loopback_needs_the_secret_and_a_coordinator_stays_out_of_a_cluster(mnemo_bin, etcd):
    done = subprocess.run([mnemo_bin, "worker", "--host", "0.0.0.0", "--port", "0"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode != 0
    assert "--cluster-secret-file" in done.stderr and "0.0.0.0" in done.stderr, done.stderr
    done = subprocess.run([mnemo_bin, "serve", "--host", "127.0.0.1", "--port", "0", "--state-dir", tempfile.mkdtemp(),
                           "--pipeline-stage", "127.0.0.1:1", "--cluster", etcd], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "outside a cluster" in done.stderr, done.stderr


def tokens_and_tops(server, messages, max_tokens: int):
    """Greedy reply's tokens and, at each, the top eight (token, logprob)."""
    r = requests.post(server.base_url + "/chat/completions", timeout=300, json={
        "model": served_model(server), "messages": messages, "temperature": 0, "max_tokens": max_tokens,
        "logprobs": True, "top_logprobs": 8})
    assert r.status_code == 200, r.text
    content = r.json()["choices"][0]["logprobs"]["content"]
    return [c["token"] for c in content], [[(t["token"], t["logprob"]) for t in c["top_logprobs"]] for c in content]


@pytest.mark.parametrize("model_name", ["gemma", "smollm2"])
def test_tensor_parallel_ranks_answer_within_llama_cpps_noise_band(start_server, workers, secret_file, model_name):
    """Two tensor ranks (Gemma's one KV head on both; SmolLM2's 9 query heads as 6 and 3) through
    the API: each greedy reply equals one instance's, or leaves it only where one instance itself
    had a near-tie (the token taken within 1 nat of its top): the ranks' partial products are
    summed in another order than one dot product (docs/parallel.md)."""
    model = reference_model_path() if model_name == "gemma" else chat_model_path()
    ranks = [workers(model), workers(model)]
    args = ["--model", model, "-t", "1", "--cluster-secret-file", secret_file]
    for w in ranks:
        args += ["--tensor-worker", w.endpoint]
    tensor = start_server(*args)
    single = start_server("--model", model, "-t", "1", "--cluster-secret-file", secret_file)
    assert any("tensor rank 1 of 2" in line for line in tensor.stdout_lines)
    history: list[dict] = []
    for turn in TURNS[:2]:
        history.append({"role": "user", "content": turn})
        got, _ = tokens_and_tops(tensor, history, 32)
        want, tops = tokens_and_tops(single, history, 32)
        same = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
        if same < min(len(got), len(want)):
            near = {token for token, lp in tops[same] if tops[same][0][1] - lp < 1.0}
            assert got[same] in near, (same, got[same], tops[same])
        else:
            assert got == want
        history.append({"role": "assistant", "content": "".join(got)})
    for w in ranks:
        assert any("stage of layers" in line for line in w.lines)


@pytest.mark.parametrize("lost", [0, 1])
def test_a_tensor_rank_killed_mid_stream_is_replaced_and_every_stream_completes_unchanged(start_server, workers, secret_file,
                                                                                          lost):
    """Two tensor ranks of SmolLM2 and a spare: the replies the ranks give without a failure
    first, then the same two prompts streamed together while one rank is SIGKILLed: the spare
    takes its place with its KV heads restored from the replica on the other rank, and both
    streams end with the failure-free text (tensor parallelism is deterministic, and batch
    invariant per rank)."""
    model = chat_model_path()
    ranks = [workers(model), workers(model)]
    spare = workers(model)
    tensor = start_server("--model", model, "-t", "1", "--cluster-secret-file", secret_file, "--tensor-worker", ranks[0].endpoint,
                          "--tensor-worker", ranks[1].endpoint, "--spare-worker", spare.endpoint, "--pipeline-step-timeout", "20")
    kill_mid_stream_and_compare(tensor, tensor, ranks[lost], spare, lost)


def test_tensor_ranks_and_their_spare_come_from_the_clusters_membership(start_server, workers, secret_file, etcd):
    """Three workers register in etcd; the coordinator takes two as its tensor ranks
    (--tensor-workers 2) and the third as the spare that replaces a rank killed mid-stream."""
    model = chat_model_path()
    registered = [workers(model, "--cluster", etcd, "--cluster-name", "tensor") for _ in range(3)]
    tensor = start_server("--model", model, "-t", "1", "--cluster-secret-file", secret_file, "--tensor-workers", "2",
                          "--pipeline-cluster", etcd, "--cluster-name", "tensor", "--pipeline-step-timeout", "20")
    rank_endpoints = [m.group(1) for m in (re.search(r"tensor rank \d of 2 at (\S+)", line) for line in tensor.stdout_lines) if m]
    assert len(rank_endpoints) == 2, tensor.log_tail()
    by_endpoint = {w.endpoint: w for w in registered}
    spare = next(w for w in registered if w.endpoint not in rank_endpoints)
    kill_mid_stream_and_compare(tensor, tensor, by_endpoint[rank_endpoints[0]], spare, 0)


LONG = ("Tell me about the fox who lived at the edge of a mountain village, and the baker who left bread on the "
        "windowsill every winter morning." + " The fox watched the baker, the baker watched the snow." * 30)
OTHER = " apple banana cherry date elderberry fig grape honeydew kiwi lemon" * 50
TIERS = ["--kv-tokens", "1024", "--host-swap-tokens", "2048", "--kv-types", "f16", "--model-name", "m"]


def complete(url: str, prompt: str, max_tokens: int = 24) -> dict:
    r = requests.post(url + "/v1/completions", json={"model": "m", "prompt": prompt, "max_tokens": max_tokens,
                                                     "temperature": 0}, timeout=300)
    assert r.status_code == 200, r.text
    return r.json()


def respond(url: str, **body) -> dict:
    r = requests.post(url + "/v1/responses", json={"model": "m", "max_output_tokens": 16, "temperature": 0, **body}, timeout=300)
    assert r.status_code == 200, r.text
    return r.json()


@pytest.mark.parametrize("sharding", ["pipeline", "tensor"])
def test_the_host_and_disk_tiers_work_across_shards_as_on_one_instance(start_server, workers, secret_file, sharding):
    """A coordinator of two SmolLM2 stages (or tensor ranks) with a 1,024-token device pool, a host
    tier and a disk tier: a long prompt's history is pushed out of the device by another, and its
    next turn comes back from the host (pulled from the workers when it left, pushed to them when
    it came back) with the output of a reference that keeps it on the device (one instance with
    the same pools; for tensor ranks, whose sums round differently from one instance's, two more
    ranks with a roomy pool). The coordinator then restarts over the same state folder and
    workers: the history comes back from the disk, with the same output, and a response stored
    before the restart goes on as the reference's does."""
    model = chat_model_path()
    shards = [workers(model), workers(model)]
    state = tempfile.mkdtemp(prefix="mnemo-e2e-pipeline-state-")
    if sharding == "pipeline":
        args = coordinator_args(model, shards, secret_file, *TIERS, "--state-dir", state)
        single = start_server("--model", model, "-t", "1", *TIERS)
    else:
        args = ["--model", model, "-t", "1", "--cluster-secret-file", secret_file, *TIERS, "--state-dir", state]
        reference = ["--model", model, "-t", "1", "--cluster-secret-file", secret_file, "--model-name", "m"]
        for w, r in zip(shards, [workers(model), workers(model)]):
            args += ["--tensor-worker", w.endpoint]
            reference += ["--tensor-worker", r.endpoint]
        single = start_server(*reference)
    pipeline = start_server(*args)
    follow_up = LONG + " What happened next?"
    for server in (pipeline, single):
        complete(server.url, LONG)
        complete(server.url, OTHER, 48)  # the device pool cannot hold both
    got, want = complete(pipeline.url, follow_up), complete(single.url, follow_up)
    assert got["choices"][0]["text"] == want["choices"][0]["text"]
    metrics = read_metrics(pipeline.url)
    assert metrics["mnemo_cache_host_hit_tokens_total"] > 0, metrics
    assert metrics["mnemo_cache_remote_pulled_blocks_total"] > 0
    assert metrics["mnemo_cache_remote_pushed_blocks_total"] > 0
    assert metrics["mnemo_cache_remote_failures_total"] == 0
    assert got["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
    stored = respond(pipeline.url, input="Name three colours of the rainbow.")
    wait_for(lambda: read_metrics(pipeline.url)["mnemo_disk_writes_queued"] == 0, timeout=60, what="disk writes")
    assert pipeline.terminate() == 0

    restarted = start_server(*args)
    again = complete(restarted.url, follow_up)
    assert again["choices"][0]["text"] == want["choices"][0]["text"]
    assert read_metrics(restarted.url)["mnemo_cache_disk_hit_tokens_total"] > 0
    went_on = respond(restarted.url, input="Which of them is the warmest?", previous_response_id=stored["id"])
    assert went_on["usage"]["input_tokens"] > stored["usage"]["input_tokens"]
    first = respond(single.url, input="Name three colours of the rainbow.")
    assert output_text(first) == output_text(stored)
    second = respond(single.url, input="Which of them is the warmest?", previous_response_id=first["id"])
    assert output_text(went_on) == output_text(second)
