"""Two models served at once (--model repeated): /v1/models lists both, each request runs on the
model it names (greedy output equal to that model served alone), each model keeps its own KV
cache, the Responses API and the tokenizer endpoints follow "model", and a model not served is a
404 naming those that are."""

from __future__ import annotations

import os
import shutil
import tempfile

import openai
import pytest
import requests

from helpers import chat_model_path, reference_model_path

CHAT_ID = "smol"
GEMMA_ID = "gemma-3-270m-q4_k_m"
MESSAGES = [{"role": "user", "content": "Name three colours of the rainbow."}]


@pytest.fixture(scope="module")
def both(start_server):
    return start_server("--model", chat_model_path(), "--model", reference_model_path(), "--model-name", CHAT_ID)


@pytest.fixture(scope="module")
def both_client(both):
    with openai.OpenAI(base_url=both.base_url, api_key="unused", max_retries=0, timeout=300) as c:
        yield c


def test_models_lists_both(both_client):
    listed = {m.id: m for m in both_client.models.list().data}
    assert set(listed) == {CHAT_ID, GEMMA_ID}
    assert both_client.models.retrieve(GEMMA_ID).id == GEMMA_ID
    with pytest.raises(openai.NotFoundError):
        both_client.models.retrieve("nope")


def test_each_request_runs_on_the_model_it_names(both, both_client, client, model_id):
    assert model_id == GEMMA_ID
    replies = {}
    for name in (CHAT_ID, GEMMA_ID):
        r = both_client.chat.completions.create(model=name, messages=MESSAGES, temperature=0, max_tokens=24)
        assert r.model == name
        replies[name] = r
    # Gemma here answers as Gemma served alone (the session's server), token for token.
    alone = client.chat.completions.create(model=model_id, messages=MESSAGES, temperature=0, max_tokens=24)
    assert replies[GEMMA_ID].choices[0].message.content == alone.choices[0].message.content
    assert replies[GEMMA_ID].usage.prompt_tokens == alone.usage.prompt_tokens
    # The two models tokenize and answer differently.
    assert replies[CHAT_ID].usage.prompt_tokens != replies[GEMMA_ID].usage.prompt_tokens
    assert replies[CHAT_ID].choices[0].message.content != replies[GEMMA_ID].choices[0].message.content
    # No "model": the first one.
    default = requests.post(both.base_url + "/chat/completions",
                            json={"messages": MESSAGES, "temperature": 0, "max_tokens": 24}, timeout=120).json()
    assert default["model"] == CHAT_ID
    assert default["choices"][0]["message"]["content"] == replies[CHAT_ID].choices[0].message.content


def test_each_model_keeps_its_own_cache(both_client):
    long_messages = [{"role": "system", "content": "You are a careful assistant. " * 20}] + MESSAGES
    for name in (CHAT_ID, GEMMA_ID):
        first = both_client.chat.completions.create(model=name, messages=long_messages, temperature=0, max_tokens=4)
        again = both_client.chat.completions.create(model=name, messages=long_messages, temperature=0, max_tokens=4)
        assert first.usage.prompt_tokens_details.cached_tokens == 0, name  # the other model's KV is not this one's
        assert again.usage.prompt_tokens_details.cached_tokens >= 32, name


def test_responses_and_tokenizer_follow_the_model(both, both_client):
    for name in (CHAT_ID, GEMMA_ID):
        turn = both_client.responses.create(model=name, input="Hello!", max_output_tokens=8, temperature=0)
        assert turn.model == name
        follow = both_client.responses.create(model=name, previous_response_id=turn.id, input="And then?",
                                              max_output_tokens=8, temperature=0)
        assert follow.model == name and follow.usage.input_tokens > turn.usage.input_tokens
    tokens = {name: requests.post(both.url + "/tokenize", json={"content": "Hello world", "model": name}, timeout=10).json()
              for name in (CHAT_ID, GEMMA_ID)}
    assert tokens[CHAT_ID]["tokens"] != tokens[GEMMA_ID]["tokens"]
    text = requests.post(both.url + "/detokenize", json={"tokens": tokens[GEMMA_ID]["tokens"], "model": GEMMA_ID},
                         timeout=10).json()
    assert text["content"] == "Hello world"


def test_a_model_not_served_is_404_naming_those_that_are(both_client):
    with pytest.raises(openai.NotFoundError) as info:
        both_client.chat.completions.create(model="gpt-4o", messages=MESSAGES, max_tokens=2)
    assert CHAT_ID in info.value.message and GEMMA_ID in info.value.message
    with pytest.raises(openai.NotFoundError):
        both_client.responses.create(model="gpt-4o", input="hi", max_output_tokens=2)


def test_a_models_folder_is_served(start_server):
    folder = tempfile.mkdtemp(prefix="mnemo-e2e-models-")
    try:
        for path in (chat_model_path(), reference_model_path()):
            os.symlink(path, os.path.join(folder, os.path.basename(path)))
        server = start_server("--model", chat_model_path(), "--models-dir", folder, "--model-name", "first")
        ids = [m["id"] for m in requests.get(server.base_url + "/models", timeout=10).json()["data"]]
        assert ids == ["first", "SmolLM2-135M-Instruct.Q4_1", GEMMA_ID]
        server.terminate()
    finally:
        shutil.rmtree(folder)
