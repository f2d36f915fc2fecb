"""response_format json_object (chat) and text.format json_object (Responses): every reply that
ends is one JSON object, whole or streamed, greedy or sampled, on Gemma 3 and on the chat model
(a small model may also loop inside the object until max_tokens: finish_reason "length", the text
a prefix of an object); the chat model ends a simple one."""

from __future__ import annotations

import json

import openai
import pytest

from helpers import chat_model_path

ASK = [{"role": "system", "content": "You are a helpful assistant that answers in JSON."},
       {"role": "user", "content": 'Write a JSON object with the keys "name" and "age" for a cat named Tom who is 3.'}]


@pytest.fixture(scope="module")
def chat_server(start_server):
    return start_server("--model", chat_model_path())


def check_object(text: str):
    value = json.loads(text)
    assert isinstance(value, dict), text
    return value


@pytest.mark.parametrize("which", ["gemma", "smollm2"])
def test_json_object_outputs_parse_whole_streamed_and_sampled(which, server, chat_server):
    url = (server if which == "gemma" else chat_server).base_url
    ended = []
    with openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=300) as client:
        model = client.models.list().data[0].id
        for temperature in (0, 0.7, 1.2):
            r = client.chat.completions.create(model=model, messages=ASK, temperature=temperature, max_tokens=200,
                                               seed=7, n=2, response_format={"type": "json_object"})
            for choice in r.choices:
                assert choice.message.content.lstrip().startswith("{")
                if choice.finish_reason == "stop":
                    ended.append(check_object(choice.message.content))
        chunks = list(client.chat.completions.create(model=model, messages=ASK, temperature=0.7, seed=3, max_tokens=200,
                                                     stream=True, response_format={"type": "json_object"}))
        streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        if any(c.choices and c.choices[0].finish_reason == "stop" for c in chunks):
            ended.append(check_object(streamed))
        turn = client.responses.create(model=model, input=ASK[1]["content"], instructions=ASK[0]["content"],
                                       temperature=0, max_output_tokens=200, text={"format": {"type": "json_object"}})
        if turn.status == "completed":
            ended.append(check_object(turn.output_text))
    if which == "smollm2":  # an instruct model ends the object it was asked for
        assert len(ended) >= 7, ended
        assert {"name": "Tom", "age": 3} in ended


def test_a_json_reply_cut_short_says_length(client, model_id):
    r = client.chat.completions.create(model=model_id, messages=ASK, temperature=0, max_tokens=3,
                                       response_format={"type": "json_object"})
    assert r.choices[0].finish_reason == "length"
    assert r.choices[0].message.content.lstrip().startswith("{")


def test_json_schema_is_refused_until_built(client, model_id):
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=model_id, messages=ASK, max_tokens=8, response_format={
            "type": "json_schema", "json_schema": {"name": "cat", "schema": {"type": "object"}}})
    assert info.value.param == "response_format"
