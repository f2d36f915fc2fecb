"""A client that goes away mid-stream cancels its request; SIGTERM stops the server gracefully."""

from __future__ import annotations

import signal
import socket

import openai

from helpers import read_metrics, wait_for

ESSAY = [{"role": "user", "content": "Write a long essay about the history of the Roman Empire."}]


def test_client_disconnect_cancels_the_request(server, client, model_id):
    before = read_metrics(server.url)
    stream = client.chat.completions.create(model=model_id, messages=ESSAY, temperature=0, max_tokens=400, stream=True,
                                            extra_body={"ignore_eos": True})
    pieces = 0
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            pieces += 1
            if pieces == 3:
                break
    assert pieces == 3
    stream.close()  # drops the connection mid-stream

    def cancelled_and_idle():
        m = read_metrics(server.url)
        done = (m["mnemo_requests_cancelled_total"] == before["mnemo_requests_cancelled_total"] + 1
                and m["mnemo_running_sequences"] == 0 and m["mnemo_waiting_sequences"] == 0)
        return m if done else None

    after = wait_for(cancelled_and_idle, timeout=20, what="the request to be cancelled and the engine idle")
    # It stopped well before max_tokens, and the KV it held is free again.
    assert after["mnemo_generation_tokens_total"] - before["mnemo_generation_tokens_total"] < 200
    assert after["mnemo_kv_blocks_used"] <= before["mnemo_kv_blocks_used"]
    # The server still serves.
    r = client.completions.create(model=model_id, prompt="Hi", max_tokens=2, temperature=0)
    assert r.usage.completion_tokens == 2


def connection_refused(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return False
    except ConnectionRefusedError:
        return True
    except ConnectionResetError:
        # Queued just as the listener closed: not refused yet, but the next attempt will be.
        return False


def test_sigterm_lets_the_running_stream_finish_then_exits_0(start_server):
    srv = start_server()
    client = openai.OpenAI(base_url=srv.base_url, api_key="unused", max_retries=0, timeout=60)
    model_id = client.models.list().data[0].id
    stream = client.chat.completions.create(model=model_id, messages=ESSAY, temperature=0, max_tokens=48, stream=True,
                                            extra_body={"ignore_eos": True}, stream_options={"include_usage": True})
    chunks = iter(stream)
    text = ""
    for chunk in chunks:
        if chunk.choices and chunk.choices[0].delta.content:
            text += chunk.choices[0].delta.content
            break
    assert text, "no content before SIGTERM"

    srv.proc.send_signal(signal.SIGTERM)
    # The listening socket closes: new connections are refused while the stream goes on.
    wait_for(lambda: connection_refused(srv.port), timeout=10, what="new connections to be refused")
    assert srv.proc.poll() is None, "the server exited before its stream finished"

    finish = None
    usage = None
    for chunk in chunks:
        for choice in chunk.choices:
            text += choice.delta.content or ""
            finish = choice.finish_reason or finish
        usage = chunk.usage or usage
    assert finish == "length"
    assert usage is not None and usage.completion_tokens == 48
    client.close()  # an idle keep-alive connection would hold the exit up to its timeout (5 s)
    assert srv.proc.wait(timeout=30) == 0, srv.log_tail()

    with_new_client = openai.OpenAI(base_url=srv.base_url, api_key="unused", max_retries=0, timeout=5)
    try:
        with_new_client.models.list()
    except openai.APIConnectionError:
        pass
    else:
        raise AssertionError("the stopped server still answered")
