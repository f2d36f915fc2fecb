"""A three-instance cluster on a tiny synthetic model (tests/support/tiny_model.h, written by
mnemo_tiny_model): a real etcd, three `mnemo serve --cluster` instances and a tokenizing router
(`mnemo route --model`) on loopback. The same properties as test_cluster.py on the default model,
at a fraction of the cost: second turns land where their prefix is cached (and the router
predicts exactly what the instance finds), output is identical through the router, on another
instance and after a KV transfer, and a killed instance stops getting requests within its lease."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import requests

from conftest import MnemoServer
from cluster_fixtures import reference_model_path, etcd, followed, free_port, instance_by_id, secure_etcd, transport_of  # noqa: F401
from helpers import UNSIGNED_PEER, read_metrics, wait_for

COMPLETION = {"model": "tiny", "max_tokens": 24, "temperature": 0, "ignore_eos": True}
# Long enough for several whole 32-token chunks with the tiny model's letter-level vocabulary.
PROMPT = ("the quick brown fox jumps over the lazy dog while the cat sleeps by the warm fire and the "
          "birds sing in the old oak tree behind the little house near the river")


@pytest.fixture(scope="module")
def tiny_model() -> str:
    tool = os.environ.get("MNEMO_TINY_MODEL_TOOL")
    if not tool:
        pytest.fail("MNEMO_TINY_MODEL_TOOL is not set (ctest sets it to the mnemo_tiny_model binary)")
    path = os.path.join(tempfile.mkdtemp(prefix="mnemo-tiny-"), "tiny.gguf")
    subprocess.run([tool, path, "gemma3", "7"], check=True)
    return path


@pytest.fixture(scope="module")
def cluster(etcd, start_server, mnemo_bin, tiny_model):
    name = f"t{os.getpid()}"
    instances = [start_server("-m", tiny_model, "--model-name", "tiny", "--cluster", etcd, "--cluster-name", name,
                              "--kv-tokens", "4096") for _ in range(3)]
    router = MnemoServer([mnemo_bin, "route", "--cluster", etcd, "--cluster-name", name, "--port", "0",
                          "--model", tiny_model])
    router.start()
    wait_for(lambda: read_metrics(router.url).get("mnemo_router_instances") == 3, 15, 0.1, "three instances in the view")
    yield {"instances": instances, "router": router, "name": name}
    if router.proc is not None and router.proc.poll() is None:
        router.terminate()


def complete(url: str, prompt: str, **extra) -> requests.Response:
    r = requests.post(url + "/v1/completions", json={**COMPLETION, "prompt": prompt, **extra}, timeout=60)
    assert r.status_code == 200, r.text
    return r


def test_second_requests_land_where_their_prefix_is_cached_as_the_router_predicts(cluster):
    router = cluster["router"].url
    wait_for(lambda: len(followed(router)) == 3, 30, 0.2, "the router to follow all three caches")
    homes = set()
    for topic in ["apples", "boats", "clocks"]:
        held_before = followed(router)
        first = complete(router, f"{topic}: {PROMPT}")
        home = first.headers["X-Mnemo-Instance"]
        homes.add(home)
        # The request's chunks reach the router as events (inserted before the reply was sent).
        wait_for(lambda: followed(router)[home] > held_before[home], 30, 0.05, "the first request's insert events")
        before = read_metrics(router)["mnemo_router_predicted_cached_tokens_total"]
        second = complete(router, f"{topic}: {PROMPT}" + first.json()["choices"][0]["text"] + " and then")
        assert second.headers["X-Mnemo-Instance"] == home, topic
        cached = second.json()["usage"]["prompt_tokens_details"]["cached_tokens"]
        assert cached >= 64, second.json()["usage"]
        assert read_metrics(router)["mnemo_router_predicted_cached_tokens_total"] - before == cached
    assert len(homes) == 3  # an idle cluster spreads new conversations over all three


def test_output_is_identical_through_the_router_on_another_instance_and_after_a_transfer(cluster):
    router = cluster["router"].url
    prompt = "delta: " + PROMPT
    via_router = complete(router, prompt)
    holder = instance_by_id(cluster, via_router.headers["X-Mnemo-Instance"])
    other = next(s for s in cluster["instances"] if s is not holder and s.proc.poll() is None)
    direct = complete(other.url, prompt)
    assert via_router.json()["choices"][0]["text"] == direct.json()["choices"][0]["text"]
    # The holder's KV moved to a third instance, which then serves the prompt from it identically.
    third = next(s for s in cluster["instances"] if s is not holder and s is not other)
    transport = transport_of(third)
    pushed = requests.post(holder.url + "/v1/internal/kv_push", timeout=60, headers=UNSIGNED_PEER,
                           json={"target": transport, "api": "completions", "request": {**COMPLETION, "prompt": prompt}})
    assert pushed.status_code == 200 and pushed.json()["chunks"] >= 2, pushed.text
    after = complete(third.url, prompt)
    assert after.json()["usage"]["prompt_tokens_details"]["cached_tokens"] >= 64
    assert after.json()["choices"][0]["text"] == via_router.json()["choices"][0]["text"]


def test_a_router_applying_the_planners_split_disaggregates_colocated_instances(cluster, mnemo_bin, etcd):
    # Prompts ten times dearer than a token's worth of decode at N = 10: with D = 3 and m = 1.1 the
    # planner splits 2 prefill : 1 decode. The instances all published "colocated".
    name = cluster["name"]
    router = MnemoServer([mnemo_bin, "route", "--cluster", etcd, "--cluster-name", name, "--port", "0",
                          "--plan-prompt-seconds", "1", "--plan-token-seconds", "0.01", "--plan-tokens", "10"])
    router.start()
    try:
        wait_for(lambda: read_metrics(router.url).get("mnemo_router_prefill_instances") == 2, 15, 0.1, "the split")
        metrics = read_metrics(router.url)
        assert metrics["mnemo_router_planned_prefill_instances"] == 2
        assert metrics["mnemo_router_instances"] == 1
        prompt = "echo: " + PROMPT
        expected = complete(cluster["instances"][0].url, prompt).json()["choices"][0]["text"]
        r = complete(router.url, prompt)
        assert r.json()["choices"][0]["text"] == expected
        # The decode instance found the prompt's KV, sent by the prefill instance.
        assert r.json()["usage"]["prompt_tokens_details"]["cached_tokens"] >= 64
        assert read_metrics(router.url)["mnemo_router_prefills_total"] == 1
    finally:
        router.terminate()
    # Bad plans are refused at start-up, with the figure named.
    bad = subprocess.run([mnemo_bin, "route", "--cluster", etcd, "--port", "0", "--plan-prompt-seconds", "1",
                          "--plan-token-seconds", "0.01", "--plan-tokens", "10", "--plan-overhead", "2.5"],
                         capture_output=True, text=True, timeout=30)
    assert bad.returncode != 0 and "overhead m must be in [1, 2)" in bad.stderr, bad.stderr
    partial = subprocess.run([mnemo_bin, "route", "--cluster", etcd, "--port", "0", "--plan-prompt-seconds", "1"],
                             capture_output=True, text=True, timeout=30)
    assert partial.returncode == 2 and "a plan needs all of" in partial.stderr, partial.stderr


def test_the_router_measures_the_planners_inputs_and_mnemo_plan_reads_them(cluster, mnemo_bin, etcd):
    # A fresh router on the same instances: Y, t and N from the generations it relays.
    router = MnemoServer([mnemo_bin, "route", "--cluster", etcd, "--cluster-name", cluster["name"], "--port", "0"])
    router.start()
    try:
        wait_for(lambda: read_metrics(router.url).get("mnemo_router_instances") == 3, 15, 0.1, "three instances")
        inputs = requests.get(router.url + "/v1/internal/plan_inputs", timeout=10).json()
        assert inputs["requests"] == 0 and inputs["machines"] == 3
        empty = subprocess.run([mnemo_bin, "plan", "--from-router", router.url], capture_output=True, text=True, timeout=30)
        assert empty.returncode == 1 and "nothing measured" in empty.stderr, empty.stderr
        for i in range(4):  # streamed: the router sees when the first text goes out
            r = requests.post(router.url + "/v1/completions", stream=True, timeout=60,
                              json={**COMPLETION, "prompt": f"plan {i}: " + PROMPT, "stream": True})
            assert r.status_code == 200
            events = [line for line in r.iter_lines() if line.startswith(b"data: ")]
            assert events[-1] == b"data: [DONE]"
        complete(router.url, "plan unstreamed: " + PROMPT)  # counts for N only
        inputs = requests.get(router.url + "/v1/internal/plan_inputs", timeout=10).json()
        assert inputs["requests"] == 5
        assert inputs["tokens_generated"] == COMPLETION["max_tokens"]  # forced with ignore_eos
        assert 0 < inputs["prompt_seconds"] < 10 and 0 < inputs["token_seconds"] < 1
        metrics = read_metrics(router.url)
        assert metrics["mnemo_router_measured_prompt_seconds"] == pytest.approx(inputs["prompt_seconds"])
        assert metrics["mnemo_router_measured_tokens_per_request"] == COMPLETION["max_tokens"]
        plan = subprocess.run([mnemo_bin, "plan", "--from-router", router.url, "--json"], capture_output=True, text=True,
                              timeout=30)
        assert plan.returncode == 0, plan.stderr
        planned = json.loads(plan.stdout)
        assert planned["inputs"]["Y"] == pytest.approx(inputs["prompt_seconds"])
        assert planned["inputs"]["t"] == pytest.approx(inputs["token_seconds"])
        assert planned["inputs"]["N"] == COMPLETION["max_tokens"]
        assert planned["inputs"]["D"] == 3
        assert planned["prompt_instances"] + planned["token_instances"] == 3
    finally:
        router.terminate()


def test_a_router_with_another_models_tokenizer_does_not_follow_the_instances(cluster, mnemo_bin, etcd):
    # The instances publish their prompt fingerprint; a router tokenizing with the default model
    # would name their chunks wrongly, so it leaves their caches alone (and says so) but routes.
    router = MnemoServer([mnemo_bin, "route", "--cluster", etcd, "--cluster-name", cluster["name"], "--port", "0",
                          "--model", reference_model_path()])
    router.start()
    try:
        wait_for(lambda: read_metrics(router.url).get("mnemo_router_instances") == 3, 15, 0.1, "the instances")
        wait_for(lambda: Path(router.stderr_path).read_text().count("tokenizes differently") == 3, 15, 0.1,
                 "the mismatch to be reported for each instance")
        assert followed(router.url) == {}
        r = complete(router.url, "foxtrot: " + PROMPT)
        assert r.json()["usage"]["completion_tokens"] == COMPLETION["max_tokens"]
    finally:
        router.terminate()


def test_a_router_authenticates_clients_itself_and_speaks_to_instances_as_a_peer(cluster, start_server, mnemo_bin, etcd,
                                                                                    tiny_model):
    """Instances and router hold the same key; the router checks the client's key and forwards a
    peer request for the client's tenant (never the key), which a keyed instance accepts, and its
    cache follower reads the instance's internal events as a peer too."""
    name = cluster["name"] + "-keyed"
    keyed = start_server("-m", tiny_model, "--model-name", "tiny", "--cluster", etcd, "--cluster-name", name,
                         "--api-key", "sesame", "--kv-tokens", "2048")
    router = MnemoServer([mnemo_bin, "route", "--cluster", etcd, "--cluster-name", name, "--port", "0",
                          "--model", tiny_model, "--api-key", "sesame"])
    try:
        router.start()
        keyed_metrics = lambda: requests.get(router.url + "/metrics", headers={"Authorization": "Bearer sesame"}, timeout=10)
        instances = lambda: [float(line.split()[-1]) for line in keyed_metrics().text.splitlines()
                             if line.startswith("mnemo_router_instances ")]
        wait_for(lambda: instances() == [1.0], 15, 0.1, "the keyed instance")
        assert requests.get(router.url + "/metrics", timeout=10).status_code == 401
        for headers in ({}, {"Authorization": "Bearer wrong"}):
            r = requests.post(router.url + "/v1/completions", headers=headers, json={**COMPLETION, "prompt": PROMPT}, timeout=60)
            assert r.status_code == 401, r.text
        r = requests.post(router.url + "/v1/completions", headers={"Authorization": "Bearer sesame"},
                          json={**COMPLETION, "prompt": PROMPT}, timeout=60)
        assert r.status_code == 200, r.text
        # A client's internal field is refused at the router: the router's own requests are a peer's.
        r = requests.post(router.url + "/v1/completions", headers={"Authorization": "Bearer sesame"},
                          json={**COMPLETION, "prompt": PROMPT, "mnemo_resume_tokens": [1]}, timeout=60)
        assert r.status_code == 400 and "mnemo_resume_tokens" in r.text, r.text
        # The instance itself refuses a client without the key, and a client's internal call.
        assert requests.post(keyed.url + "/v1/completions", json={**COMPLETION, "prompt": PROMPT}, timeout=60).status_code == 401
        r = requests.get(keyed.url + "/v1/internal/cache_events", headers={"Authorization": "Bearer sesame"}, timeout=10)
        assert r.status_code == 403, r.text
    finally:
        router.terminate()
        keyed.terminate()


def test_a_sealed_cluster_refuses_a_forged_member_record_and_counts_it(cluster, start_server, mnemo_bin, etcd, tiny_model):
    """Instances and router hold the cluster secret: member records are sealed under it, so a
    record written to etcd without it (here: one that would send traffic to 10.6.6.66) is refused
    by the router and counted, and requests still go to the real instance."""
    import base64
    from helpers import CLUSTER_SECRET
    name = cluster["name"] + "-sealed"
    secret_file = os.path.join(tempfile.mkdtemp(prefix="mnemo-e2e-sealed-"), "secret")
    Path(secret_file).write_text(CLUSTER_SECRET)
    sealed = start_server("-m", tiny_model, "--model-name", "tiny", "--cluster", etcd, "--cluster-name", name,
                          "--cluster-secret-file", secret_file, "--kv-tokens", "2048")
    router = MnemoServer([mnemo_bin, "route", "--cluster", etcd, "--cluster-name", name, "--port", "0",
                          "--cluster-secret-file", secret_file])
    try:
        router.start()
        wait_for(lambda: read_metrics(router.url).get("mnemo_router_instances") == 1, 15, 0.1, "the sealed instance")
        forged = {"id": "evil", "address": "http://10.6.6.66:8000", "role": "colocated", "capacity_tokens": 1 << 20}
        key = f"/mnemo/{name}/instances/evil".encode()
        r = requests.post(etcd + "/v3/kv/put", timeout=10, json={"key": base64.b64encode(key).decode(),
                                                                  "value": base64.b64encode(json.dumps(forged).encode()).decode()})
        assert r.status_code == 200, r.text
        wait_for(lambda: read_metrics(router.url).get("mnemo_router_member_records_refused_total", 0) >= 1, 10, 0.1,
                 "the forged record to be refused")
        assert read_metrics(router.url)["mnemo_router_instances"] == 1
        for _ in range(3):
            r = complete(router.url, PROMPT)
            assert r.headers["X-Mnemo-Instance"] not in ("", "evil")
    finally:
        router.terminate()
        sealed.terminate()


def test_a_cluster_on_an_etcd_with_tls_and_auth(secure_etcd, start_server, mnemo_bin, tiny_model):
    """Instance and router reach etcd over TLS (its certificate checked against the CA) as an etcd
    user; an anonymous writer is refused by etcd itself; a router without the CA cannot start."""
    name = f"tls{os.getpid()}"
    e = secure_etcd
    access = ["--etcd-ca-file", e["ca"], "--etcd-user", e["user"], "--etcd-password-file", e["password_file"]]
    instance = start_server("-m", tiny_model, "--model-name", "tiny", "--cluster", e["url"], "--cluster-name", name,
                            "--kv-tokens", "2048", *access)
    router = MnemoServer([mnemo_bin, "route", "--cluster", e["url"], "--cluster-name", name, "--port", "0", *access])
    try:
        router.start()
        wait_for(lambda: read_metrics(router.url).get("mnemo_router_instances") == 1, 15, 0.1, "the instance over TLS")
        r = complete(router.url, PROMPT)
        assert r.headers["X-Mnemo-Instance"]
        # etcd refuses a writer without a token, so no one without the password adds a member.
        anonymous = requests.post(e["url"] + "/v3/kv/put", json={"key": "YQ==", "value": "Yg=="}, verify=e["ca"], timeout=10)
        assert "user name is empty" in anonymous.text, anonymous.text
        # Without the CA the router does not trust etcd's certificate.
        untrusting = subprocess.run([mnemo_bin, "route", "--cluster", e["url"], "--cluster-name", name, "--port", "0",
                                     "--etcd-user", e["user"], "--etcd-password-file", e["password_file"]],
                                    capture_output=True, text=True, timeout=60)
        assert untrusting.returncode != 0
        assert "etcd" in untrusting.stderr, untrusting.stderr
    finally:
        router.terminate()
        instance.terminate()


def test_slow_clients_hold_no_router_thread(cluster):
    """300 clients trickling a header byte at a time leave the router's routing fast."""
    import socket
    host, port = cluster["router"].url.split("://", 1)[1].split(":")
    slow = [socket.create_connection((host, int(port)), timeout=10) for _ in range(300)]
    try:
        for s in slow:
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nX-Slow: ")
        started = time.monotonic()
        complete(cluster["router"].url, PROMPT, max_tokens=1)
        assert time.monotonic() - started < 2.0
        assert requests.get(cluster["router"].url + "/health", timeout=2).status_code == 200
    finally:
        for s in slow:
            s.close()


def test_a_killed_instance_stops_getting_requests_within_its_lease(cluster):
    router = cluster["router"].url
    victim = cluster["instances"][2]
    victim.kill()
    killed_at = time.monotonic()
    wait_for(lambda: read_metrics(router).get("mnemo_router_instances") == 2, 10, 0.1, "the lease to expire")
    assert time.monotonic() - killed_at < 3 + 2.5
    wait_for(lambda: len(followed(router)) == 2, 10, 0.1, "the router to stop following it")
    for i in range(6):
        r = complete(router, f"echo {i}: " + PROMPT)
        assert instance_by_id(cluster, r.headers["X-Mnemo-Instance"]) is not victim


def test_kv_types_a_model_cannot_hold_are_refused_when_named_and_left_out_by_default(mnemo_bin, tiny_model):
    # The tiny model's heads are 16 wide: q8_0 needs rows of 32. Named, it is a clear error; by
    # default (serve's host=k4v8,disk=k4v8: its values are Q8_0 rows) the model keeps F16 tiers and says so.
    state = tempfile.mkdtemp(prefix="mnemo-tiny-kv-")
    named = subprocess.run([mnemo_bin, "serve", "-m", tiny_model, "--port", "0", "--state-dir", state,
                            "--kv-types", "device=f16,host=q8_0"], capture_output=True, text=True, timeout=60)
    assert named.returncode != 0
    assert "--kv-types: KV element type q8_0 needs head dimensions that are multiples of 32" in named.stderr, named.stderr
    default = MnemoServer([mnemo_bin, "serve", "-m", tiny_model, "--host", "127.0.0.1", "--port", "0", "--state-dir", state])
    default.start()
    try:
        r = requests.post(default.url + "/v1/completions", json={**COMPLETION, "prompt": "one two three"}, timeout=60)
        assert r.status_code == 200, r.text
        assert "its KV stays f16 in every tier" in default.log_tail()
        assert read_metrics(default.url)["mnemo_host_exact_blocks_total"] == 0
    finally:
        default.terminate()
