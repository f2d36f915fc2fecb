"""The edge as an attacker meets it: each test reproduces a finding of issue 22 against a real
server on the default model, and checks that it is now refused while the server lives."""
from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import tempfile
import time

import pytest
import requests

from helpers import CLUSTER_SECRET, peer_headers, peer_post, read_metrics

ALICE, BOB = "alice-key-0001", "bob-key-0002"
METRICS_KEY = "metrics-key-0003"


def bearer(key: str) -> dict:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture(scope="module")
def tenants_server(start_server):
    folder = tempfile.mkdtemp(prefix="mnemo-e2e-keys-")
    keys = os.path.join(folder, "keys")
    with open(keys, "w") as f:
        f.write(f"# tenants\nalice {ALICE}\nbob {BOB}\n")
    return start_server("--api-key-file", keys, "--metrics-key", METRICS_KEY)


def alive(url: str, headers: dict | None = None):
    r = requests.post(url + "/v1/chat/completions", headers=headers or {},
                      json={"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1, "temperature": 0}, timeout=60)
    assert r.status_code == 200, r.text


def test_deeply_nested_bodies_are_400_and_the_server_lives(server):
    deep = b"[" * 100_000 + b"]" * 100_000
    bodies = [
        ("/v1/responses", b'{"input":"hi","temperature":' + deep + b"}"),
        ("/v1/responses", b'{"input":"hi","unknown":' + b"[" * 1_000_000 + b"]" * 1_000_000 + b"}"),
        ("/v1/chat/completions", b'{"messages":[{"role":"user","content":"x"}],"stop":' + deep + b"}"),
    ]
    for path, body in bodies:
        r = requests.post(server.url + path, data=body, headers={"Content-Type": "application/json"}, timeout=60)
        assert r.status_code == 400, r.text
        assert "nested deeper" in r.json()["error"]["message"]
    # Internal endpoints parse within the same bounds, for a signed peer too.
    r = peer_post(server.url + "/v1/internal/responses_import",
                  data=b'{"request":{"input":"x","stop":' + deep + b'},"response":{}}', timeout=60)
    assert r.status_code == 400, r.text
    alive(server.url)


def test_client_input_of_the_wrong_type_is_400_never_500(server):
    for body in ({"input": "hi", "stream": "yes"}, {"input": "hi", "store": 1}, {"input": "hi", "instructions": 5},
                 {"input": "hi", "max_output_tokens": "many"}):
        r = requests.post(server.url + "/v1/responses", json=body, timeout=60)
        assert r.status_code == 400, (body, r.text)
        assert "json.exception" not in r.text
    r = requests.post(server.url + "/v1/completions", json={"prompt": [2 ** 32 + 5], "max_tokens": 1}, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == "prompt", r.text
    r = requests.post(server.url + "/v1/chat/completions",
                      json={"messages": [{"role": "user", "content": "x"}], "stop": ["a" * 5000]}, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == "stop", r.text


def test_internal_fields_and_endpoints_are_refused_from_clients(server):
    chat = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
    for field, value in [("mnemo_replica", "127.0.0.1:1"), ("mnemo_resume_tokens", [1, 2]), ("mnemo_persist_running", True),
                         ("mnemo_report_tokens", True)]:
        r = requests.post(server.url + "/v1/chat/completions", json={**chat, field: value}, timeout=60)
        assert r.status_code == 400 and r.json()["error"]["param"] == field, r.text
        r = requests.post(server.url + "/v1/responses", json={"input": "Hi", field: value}, timeout=60)
        assert r.status_code == 400 and r.json()["error"]["param"] == field, r.text
    for path, body in [("/v1/internal/kv_push", {"target": "127.0.0.1:1", "request": chat}),
                       ("/v1/internal/responses_import", {"request": {"input": "x"}, "response": {}}),
                       ("/v1/internal/responses_prompt", {"input": "x"})]:
        r = requests.post(server.url + path, json=body, timeout=60)
        assert r.status_code == 403, (path, r.text)
    assert requests.get(server.url + "/v1/internal/cache_events", timeout=10).status_code == 403


def test_forged_stale_and_replayed_peer_signatures_are_refused_and_counted(server):
    url = server.url + "/v1/chat/completions"
    body = json.dumps({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1, "mnemo_report_tokens": True}).encode()
    before = read_metrics(server.url)["mnemo_auth_refused_peers_total"]
    forged = peer_headers("POST", url, body, secret="another-cluster-secret-0123456789abcdef")
    signed = peer_headers("POST", url, body)
    tampered_body = body.replace(b'"max_tokens": 1', b'"max_tokens": 9')
    assert tampered_body != body
    refusals = [(forged, body), (signed, tampered_body), ({"X-Mnemo-Peer": "v0;"}, body),
                ({"X-Mnemo-Peer": "v1;1;" + "0" * 32 + ";;" + "0" * 64}, body)]
    for headers, data in refusals:
        r = requests.post(url, data=data, headers={"Content-Type": "application/json", **headers}, timeout=60)
        assert r.status_code == 401, r.text
    ok = requests.post(url, data=body, headers={"Content-Type": "application/json", **signed}, timeout=60)
    assert ok.status_code == 200, ok.text
    replayed = requests.post(url, data=body, headers={"Content-Type": "application/json", **signed}, timeout=60)
    assert replayed.status_code == 401 and "replayed" in replayed.text
    assert read_metrics(server.url)["mnemo_auth_refused_peers_total"] == before + len(refusals) + 1


def test_stored_conversations_belong_to_their_tenant(tenants_server):
    url = tenants_server.url
    first = requests.post(url + "/v1/responses", headers=bearer(ALICE), timeout=120,
                          json={"input": "My secret word is heliotrope. Repeat it.", "max_output_tokens": 8, "temperature": 0})
    assert first.status_code == 200, first.text
    rid = first.json()["id"]
    assert rid.startswith("resp_") and len(rid) == len("resp_") + 32 and int(rid[5:], 16) >= 0  # 128 random bits
    # Bob cannot read, continue or delete Alice's turn: to him it does not exist.
    assert requests.get(url + f"/v1/responses/{rid}", headers=bearer(BOB), timeout=30).status_code == 404
    cont = requests.post(url + "/v1/responses", headers=bearer(BOB), timeout=60,
                         json={"input": "What was the secret word?", "previous_response_id": rid, "max_output_tokens": 8})
    assert cont.status_code == 404, cont.text
    assert requests.delete(url + f"/v1/responses/{rid}", headers=bearer(BOB), timeout=30).status_code == 404
    # A peer importing under Bob's tenant cannot overwrite Alice's id either (an id is never replaced).
    fake = {**first.json(), "output": [{"type": "message", "id": "msg_x", "role": "assistant", "status": "completed",
                                        "content": [{"type": "output_text", "text": "INJECTED", "annotations": []}]}]}
    for tenant in ("bob", "alice"):
        r = peer_post(url + "/v1/internal/responses_import", {"request": {"input": "x"}, "response": fake}, tenant=tenant,
                      secret=CLUSTER_SECRET, timeout=30)
        assert r.status_code == 409, r.text
    mine = requests.get(url + f"/v1/responses/{rid}", headers=bearer(ALICE), timeout=30)
    assert mine.status_code == 200 and "INJECTED" not in mine.text
    # Alice continues and deletes her own.
    cont = requests.post(url + "/v1/responses", headers=bearer(ALICE), timeout=60,
                         json={"input": "Again.", "previous_response_id": rid, "max_output_tokens": 4})
    assert cont.status_code == 200, cont.text
    assert requests.delete(url + f"/v1/responses/{rid}", headers=bearer(ALICE), timeout=30).status_code == 200


def test_keys_guard_every_endpoint_but_health_and_the_page(tenants_server):
    url = tenants_server.url
    assert requests.get(url + "/health", timeout=10).status_code == 200
    assert requests.get(url + "/", timeout=10).status_code == 200
    for key in (None, "wrong", ALICE[:-1], ALICE + "x"):
        headers = bearer(key) if key else {}
        assert requests.get(url + "/v1/models", headers=headers, timeout=10).status_code == 401
    assert requests.get(url + "/v1/models", headers=bearer(BOB), timeout=10).status_code == 200
    # /metrics has its own key.
    assert requests.get(url + "/metrics", timeout=10).status_code == 401
    assert requests.get(url + "/metrics", headers=bearer(ALICE), timeout=10).status_code == 401
    assert requests.get(url + "/metrics", headers=bearer(METRICS_KEY), timeout=10).status_code == 200


def test_without_keys_a_dummy_bearer_does_not_split_the_cache(server):
    messages = [{"role": "user", "content": "Describe the life of a lighthouse keeper on a remote island in winter, "
                                            "with the storms, the lamp, the logbook and the supply boat." * 2}]
    for i, key in enumerate(("dummy-1", "dummy-2")):
        r = requests.post(server.url + "/v1/chat/completions", headers=bearer(key), timeout=120,
                          json={"messages": messages, "max_tokens": 1, "temperature": 0})
        assert r.status_code == 200, r.text
        cached = r.json()["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached > 0  # the second key found the first one's KV: one tenant


def test_a_chunked_body_over_the_limit_is_413(server):
    host, port = server.url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=30)
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Transfer-Encoding: chunked\r\n\r\n")
    chunk = b"x" * (1 << 20)
    status = b""
    try:
        for _ in range(50):  # 50 MB
            sock.sendall(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
    except (BrokenPipeError, ConnectionResetError):
        pass  # the server stopped reading once the limit was passed
    try:
        status = sock.recv(4096)
    except ConnectionResetError:
        pass
    sock.close()
    assert b" 413 " in status.split(b"\r\n")[0], status[:200]
    alive(server.url)


def test_too_many_header_fields_are_431(server):
    headers = {f"X-Filler-{i}": "1" for i in range(300)}
    r = requests.get(server.url + "/v1/models", headers=headers, timeout=30)
    assert r.status_code == 431, r.text


def test_a_busy_port_exits_nonzero_before_loading_the_model(server, mnemo_bin):
    port = server.url.rsplit(":", 1)[1]
    started = time.monotonic()
    proc = subprocess.run([mnemo_bin, "serve", "--host", "127.0.0.1", "--port", port,
                           "--state-dir", tempfile.mkdtemp(prefix="mnemo-e2e-busy-")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "address in use" in proc.stderr, proc.stderr
    assert "serving" not in proc.stdout
    assert time.monotonic() - started < 5  # refused before the model loaded
    alive(server.url)


def test_a_damaged_store_leaves_chat_serving_and_responses_503(start_server):
    state = tempfile.mkdtemp(prefix="mnemo-e2e-damaged-")
    with open(os.path.join(state, "responses.sqlite"), "wb") as f:
        f.write(b"this is not a database" * 100)
    damaged = start_server("--state-dir", state)
    alive(damaged.url)
    r = requests.post(damaged.url + "/v1/responses", json={"input": "Hi", "max_output_tokens": 2}, timeout=60)
    assert r.status_code == 503, r.text
    assert requests.get(damaged.url + "/v1/responses/resp_1", timeout=30).status_code == 503
    assert read_metrics(damaged.url)["mnemo_response_store_out_of_service"] == 1
    damaged.terminate()


def test_a_turn_is_acknowledged_only_once_stored(start_server):
    """On a full disk a Responses turn is not answered 200 (nor completed on a stream)."""
    mount = tempfile.mkdtemp(prefix="mnemo-e2e-full-")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", mount], check=True)
    try:
        full = start_server("--state-dir", mount, "--disk-cache-bytes", "0")
        ok = requests.post(full.url + "/v1/responses", json={"input": "Hi", "max_output_tokens": 2}, timeout=60)
        assert ok.status_code == 200, ok.text
        filler = os.path.join(mount, "filler")
        with open(filler, "wb") as f:
            try:
                while True:
                    f.write(b"\0" * 65536)
                    f.flush()
            except OSError:
                pass
        long_input = "Tell me a long story about the sea. " * 60
        r = requests.post(full.url + "/v1/responses", json={"input": long_input, "max_output_tokens": 4}, timeout=60)
        assert r.status_code == 507, r.text
        stream = requests.post(full.url + "/v1/responses", stream=True, timeout=60,
                               json={"input": long_input + " Again.", "max_output_tokens": 4, "stream": True})
        text = stream.text
        assert "response.completed" not in text and "response.failed" in text and "event: error" in text, text[-500:]
        os.remove(filler)
        again = requests.post(full.url + "/v1/responses", json={"input": "Hi again", "max_output_tokens": 2}, timeout=60)
        assert again.status_code == 200, again.text
        full.terminate()
    finally:
        subprocess.run(["umount", "-l", mount], check=False)


def test_committed_wal_frames_lost_to_damage_are_detected_and_counted(start_server):
    """A flipped byte mid-WAL makes SQLite's recovery drop the committed frames after it without a
    word; the server finds them at start, logs and counts them."""
    state = tempfile.mkdtemp(prefix="mnemo-e2e-wal-")
    path = os.path.join(state, "responses.sqlite")
    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA wal_autocheckpoint=0")
    db.execute("CREATE TABLE responses (id TEXT PRIMARY KEY, previous_id TEXT NOT NULL, input_messages TEXT NOT NULL, "
               "response TEXT NOT NULL, cache_namespace INTEGER NOT NULL DEFAULT 0, tenant TEXT NOT NULL DEFAULT '')")
    db.commit()
    for i in range(4):
        db.execute("INSERT INTO responses VALUES (?, '', '[]', '{}', 0, '')", (f"resp_{i}",))
        db.commit()
    with open(path + "-wal", "rb") as f:
        wal = bytearray(f.read())  # as a kill -9 would leave it (closing checkpoints it away)
    db.close()
    page_size = int.from_bytes(wal[8:12], "big")
    frames = (len(wal) - 32) // (24 + page_size)
    assert frames >= 4
    wal[32 + (24 + page_size) + 24 + 100] ^= 0xFF  # the second frame's page
    with open(path + "-wal", "wb") as f:
        f.write(wal)
    restarted = start_server("--state-dir", state)
    assert read_metrics(restarted.url)["mnemo_response_store_wal_frames_dropped_total"] > 0
    assert os.path.exists(path + "-wal.damaged")
    restarted.terminate()
