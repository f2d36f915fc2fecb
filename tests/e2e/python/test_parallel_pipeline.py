"""Pipeline parallelism end to end (SPEC D6): `mnemo serve --pipeline-stage` as the coordinator of
two `mnemo worker` stages, each holding half of the model's layers, over signed UCX links.

Through the OpenAI API, greedy output of Gemma 3 270M and SmolLM2 equals one instance's token
for token over multi-turn conversations whose later turns hit the prefix cache (the KV of those
turns lives on the stages), in streams and in concurrent requests (several microbatches a pass).
A stage set up for another model refuses, so the coordinator does not start; a stage killed with
SIGKILL fails the requests that need it with an error, at once, instead of hanging them.
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

from helpers import CLUSTER_SECRET, chat_model_path, reference_model_path

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

    def __init__(self, mnemo_bin: str, model: str, secret_file: str):
        self.proc = subprocess.Popen(
            [mnemo_bin, "worker", "--model", model, "--port", "0", "-t", "1", "--cluster-secret-file", secret_file],
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

    def start(model: str) -> Worker:
        w = Worker(mnemo_bin, model, secret_file)
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


def chat(server, messages, stream=False):
    model = served_model(server)
    with openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=300) as c:
        if not stream:
            r = c.chat.completions.create(model=model, messages=messages, temperature=0, max_tokens=MAX_TOKENS)
            return r.choices[0].message.content, r.usage
        text, usage = "", None
        for chunk in c.chat.completions.create(model=model, messages=messages, temperature=0, max_tokens=MAX_TOKENS,
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
