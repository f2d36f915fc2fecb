"""Helpers shared by the end-to-end tests (metrics parsing, polling, raw SSE reading)."""

from __future__ import annotations

import json
import os
import re
import time

import pytest
import requests

API_KEY = "sk-mnemo-e2e-secret"  # the key of the auth_server fixture

# The cluster secret every standalone test server holds (conftest.start_server), so a test can
# act as a cluster peer (a router) on the internal surface with peer_post().
CLUSTER_SECRET = "e2e-cluster-secret-0123456789abcdef0123456789abcdef"
# What a router sends in a loopback cluster without a secret (test_cluster's instances).
UNSIGNED_PEER = {"X-Mnemo-Peer": "v0;"}


def model_cache() -> str:
    """The model cache of src/util/paths.cpp."""
    return os.environ.get("MNEMO_CACHE") or (
        os.environ["XDG_CACHE_HOME"] + "/mnemo" if os.environ.get("XDG_CACHE_HOME") else os.path.expanduser("~/.cache/mnemo"))


def reference_model_path() -> str:
    """Gemma 3 270M, the model most tests run on (passed to `mnemo serve` explicitly)."""
    return model_cache() + "/models/gemma-3-270m-q4_k_m.gguf"


def chat_model_path() -> str:
    """SmolLM2-135M-Instruct, the model `mnemo serve` serves by default."""
    return model_cache() + "/models/SmolLM2-135M-Instruct.Q4_1.gguf"


def peer_headers(method: str, url: str, body: bytes, tenant: str = "", secret: str = CLUSTER_SECRET) -> dict:
    """X-Mnemo-Peer for one request (auth/peer_signature.h): v1;<ms>;<nonce>;<tenant>;<HMAC>."""
    import hashlib, hmac, secrets, urllib.parse
    path = urllib.parse.urlsplit(url).path
    now, nonce = str(int(time.time() * 1000)), secrets.token_hex(16)
    message = "\n".join(["mnemo-peer-v1", method, path, tenant, now, nonce, hashlib.sha256(body).hexdigest()])
    mac = hmac.new(secret.encode(), message.encode(), hashlib.sha256).hexdigest()
    return {"X-Mnemo-Peer": f"v1;{now};{nonce};{tenant};{mac}"}


def peer_post(url: str, json_body=None, data: bytes | None = None, tenant: str = "", secret: str = CLUSTER_SECRET, **kwargs):
    """POST as a signed cluster peer acting for `tenant`."""
    body = data if data is not None else json.dumps(json_body).encode()
    headers = {"Content-Type": "application/json", **peer_headers("POST", url, body, tenant, secret), **kwargs.pop("headers", {})}
    return requests.post(url, data=body, headers=headers, **kwargs)

# ---- /metrics ----------------------------------------------------------------------------------

METRIC_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$")


def read_metrics(url: str) -> dict[str, float]:
    """Prometheus text -> {"name" or "name{labels}": value}."""
    r = requests.get(url + "/metrics", timeout=10)
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"].startswith("text/plain")
    out: dict[str, float] = {}
    for line in r.text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = METRIC_LINE.match(line)
        assert m, f"not a Prometheus sample line: {line!r}"
        out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return out


def wait_for(predicate, timeout: float, interval: float = 0.05, what: str = "condition"):
    """Polls predicate() until it returns a truthy value (returned) or the timeout passes (fails)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    pytest.fail(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def sse_blocks(response: requests.Response):
    """Yields the events of a streamed (SSE) response as bytes, after checking its status and type.
    Splits on the blank line that ends each event, not on every Unicode line break (sampled text
    can hold U+2028 or a form feed, which str.splitlines would cut at); a partial event at the end
    of the stream fails."""
    assert response.status_code == 200, response.text
    assert response.headers["Content-Type"].startswith("text/event-stream")
    buffer = b""
    for piece in response.iter_content(chunk_size=None):
        buffer += piece
        while b"\n\n" in buffer:
            event, buffer = buffer.split(b"\n\n", 1)
            yield event
    assert buffer == b"", f"a partial event at the end: {buffer!r}"


def sse_events(response: requests.Response):
    """Yields the JSON payloads of a streamed chat or completion, then "[DONE]"; checks the framing."""
    for event in sse_blocks(response):
        assert event.startswith(b"data: "), f"unexpected SSE event {event!r}"
        data = event[len(b"data: "):].decode()
        if data == "[DONE]":
            yield data
            return
        yield json.loads(data)


def response_stream_events(response: requests.Response):
    """Yields the payloads of a Responses API stream ("event: TYPE" then "data: JSON" of that type);
    checks the framing."""
    for event in sse_blocks(response):
        name, data = event.decode().split("\n", 1)
        assert name.startswith("event: ") and data.startswith("data: "), f"unexpected SSE event {event!r}"
        payload = json.loads(data[len("data: "):])
        assert payload["type"] == name[len("event: "):]
        yield payload


def pick_stop_string(text: str) -> tuple[str, str]:
    """A stop string taken from the middle of `text`, and what the output must be with it."""
    middle = len(text) // 2
    for start in range(middle, len(text) - 3):
        candidate = text[start:start + 3]
        if candidate.strip() == candidate and candidate.strip():
            return candidate, text[: text.find(candidate)]
    pytest.fail(f"no usable stop string in {text!r}")


def output_text(response: dict) -> str:
    """The text of a Responses API response object."""
    return "".join(part["text"] for item in response["output"] for part in item["content"]
                   if part["type"] == "output_text")
