"""Errors in OpenAI's format ({"error": {"message", "type", "param", "code"}}) with the right HTTP
status: through the openai client's exceptions where it can send the request, raw otherwise."""

from __future__ import annotations

import openai
import pytest

from helpers import peer_post

MESSAGES = [{"role": "user", "content": "Hi"}]


def check_error_body(response, status: int, param=None, code=None) -> dict:
    assert response.status_code == status, response.text
    assert response.headers["Content-Type"].startswith("application/json")
    error = response.json()["error"]
    assert isinstance(error["message"], str) and error["message"]
    assert isinstance(error["type"], str) and error["type"]
    assert "param" in error and "code" in error
    if param is not None:
        assert error["param"] == param, error
    if code is not None:
        assert error["code"] == code, error
    return error


def test_malformed_json_is_400(server, raw):
    r = raw.post(server.base_url + "/chat/completions", data=b'{"messages": [', headers={"Content-Type": "application/json"},
                 timeout=30)
    error = check_error_body(r, 400)
    assert error["type"] == "invalid_request_error"


def test_body_not_an_object_is_400(server, raw):
    r = raw.post(server.base_url + "/completions", json=["a", "b"], timeout=30)
    check_error_body(r, 400)


def test_wrong_type_names_the_param(client, model_id):
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=model_id, messages=MESSAGES, temperature="hot", max_tokens=2)
    assert info.value.status_code == 400
    assert info.value.param == "temperature"
    assert info.value.type == "invalid_request_error"
    assert "temperature" in info.value.message


@pytest.mark.parametrize("body,param", [
    ({"messages": "hello"}, "messages"),
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "wizard", "content": "hi"}]}, "messages[0].role"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    ({"messages": MESSAGES, "max_tokens": "ten"}, "max_tokens"),
    ({"messages": MESSAGES, "max_tokens": 0}, "max_tokens"),
    ({"messages": MESSAGES, "n": 1.5}, "n"),
    ({"messages": MESSAGES, "top_p": 3}, "top_p"),
    ({"messages": MESSAGES, "stream": "yes"}, "stream"),
    ({"messages": MESSAGES, "stop": 7}, "stop"),
    ({"messages": MESSAGES, "seed": "x"}, "seed"),
    ({"messages": MESSAGES, "model": 3}, "model"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_chat_field_errors_name_the_param(server, raw, body, param):
    r = raw.post(server.base_url + "/chat/completions", json=body, timeout=30)
    check_error_body(r, 400, param=param)


@pytest.mark.parametrize("body,param", [
    ({}, "prompt"),
    ({"prompt": {"text": "hi"}}, "prompt"),
    ({"prompt": "hi", "logprobs": 50}, "logprobs"),
])
def test_completions_field_errors_name_the_param(server, raw, body, param):
    r = raw.post(server.base_url + "/completions", json=body, timeout=30)
    check_error_body(r, 400, param=param)


@pytest.mark.parametrize("kwargs,param", [
    ({"tools": [{"type": "custom", "custom": {"name": "x"}}]}, "tools"),
    ({"tool_choice": "required"}, "tool_choice"),  # without tools
    ({"response_format": {"type": "yaml"}}, "response_format"),
    ({"function_call": "auto"}, "function_call"),
    ({"extra_body": {"no_such_field": {"deep": [1, 2]}}}, "no_such_field"),
])
def test_unsupported_chat_parameters_are_400_naming_them(client, model_id, kwargs, param):
    # OpenAI rejects arguments it does not recognise: a client must never believe it got a tool
    # call or structured output and receive plain text.
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=model_id, messages=MESSAGES, max_tokens=2, **kwargs)
    assert info.value.param == param
    assert param in info.value.message


def test_unsupported_completions_and_responses_parameters_are_400(client, model_id):
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model=model_id, prompt="Hi", max_tokens=2, suffix=" and so on.")
    assert info.value.param == "suffix"
    assert "fill-in-the-middle" in info.value.message
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model=model_id, input="Hi", max_output_tokens=16,
                                text={"format": {"type": "json_schema", "name": "x", "schema": {"type": "array"}}})
    assert info.value.param == "text"


def test_documented_no_ops_and_default_values_are_accepted(client, model_id):
    r = client.chat.completions.create(model=model_id, messages=MESSAGES, temperature=0, max_tokens=2, user="u1",
                                       metadata={"k": "v"}, tools=[], tool_choice="none",
                                       response_format={"type": "text"})
    assert r.choices[0].message.content is not None
    assert r.usage.completion_tokens >= 1


def test_prompt_longer_than_context_is_400(client, model_id, model_info):
    context = model_info["context_length"]
    assert context > 0
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model=model_id, prompt=[2] + [818] * context, max_tokens=1)
    assert info.value.param == "prompt"
    assert str(context) in info.value.message
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=model_id, messages=[{"role": "user", "content": "word " * (context + 10)}],
                                       max_tokens=1)
    assert info.value.param == "messages"


def test_max_tokens_beyond_the_context_is_400(client, model_id, model_info):
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=model_id, messages=MESSAGES, max_tokens=model_info["context_length"])
    assert info.value.param == "max_tokens"
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model=model_id, prompt="Hi", max_tokens=model_info["context_length"])
    assert info.value.param == "max_tokens"


def test_unknown_model_is_404(client):
    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(model="gpt-nonexistent", messages=MESSAGES, max_tokens=2)
    assert info.value.status_code == 404
    assert info.value.code == "model_not_found"
    assert info.value.param == "model"
    with pytest.raises(openai.NotFoundError) as info:
        client.completions.create(model="gpt-nonexistent", prompt="Hi", max_tokens=2)
    assert info.value.code == "model_not_found"


def test_body_over_the_size_limit_is_413(server, raw):
    body = b'{"prompt": "' + b"a" * (9 << 20) + b'"}'
    r = raw.post(server.base_url + "/completions", data=body, headers={"Content-Type": "application/json"}, timeout=60)
    check_error_body(r, 413)


@pytest.mark.parametrize("method,path", [("GET", "/v1/nothing-here"), ("POST", "/v1/engines/x/completions"),
                                         ("GET", "/no/such/page.html")])
def test_unknown_route_is_404_json(server, raw, method, path):
    r = raw.request(method, server.url + path, json={} if method == "POST" else None, timeout=30)
    error = check_error_body(r, 404)
    assert error["type"] == "invalid_request_error"


def test_server_is_healthy_after_the_errors(server, raw, client, model_id):
    assert raw.get(server.url + "/health", timeout=10).json() == {"status": "ok"}
    r = client.completions.create(model=model_id, prompt="Hi", max_tokens=1, temperature=0)
    assert r.usage.completion_tokens == 1


def test_router_fields_of_the_wrong_shape_are_400(server, raw, model_id):
    """mnemo_resume_tokens / mnemo_replica / mnemo_report_tokens come from a router (SPEC D7); a
    wrong one is a clear 400, and a resume the engine cannot continue is refused."""
    base = {"model": model_id, "messages": MESSAGES, "max_tokens": 4}
    for field, value in [("mnemo_resume_tokens", "1,2"), ("mnemo_resume_tokens", [1, "x"]), ("mnemo_resume_tokens", [-1]),
                         ("mnemo_replica", 5), ("mnemo_report_tokens", "yes"), ("mnemo_replica_known_tokens", [-3]),
                         ("mnemo_replica_at_end", True), ("mnemo_replica_at_end", [1]), ("mnemo_replica_at_end", [True] * 9)]:
        r = peer_post(server.base_url + "/chat/completions", {**base, field: value}, timeout=30)
        check_error_body(r, 400, param=field)
    for resume in ([7, 8, 9, 10], [10 ** 9]):  # nothing left within max_tokens; outside the vocabulary
        r = peer_post(server.base_url + "/chat/completions", {**base, "mnemo_resume_tokens": resume}, timeout=30)
        check_error_body(r, 400)
    # A resumed request answers with the rest, counting what it resumed with.
    r = peer_post(server.base_url + "/chat/completions", {**base, "temperature": 0, "mnemo_resume_tokens": [7, 8]}, timeout=60)
    assert r.status_code == 200, r.text
    usage = r.json()["usage"]
    assert usage["completion_tokens"] == 4
    assert usage["prompt_tokens_details"]["resumed_tokens"] == 2
