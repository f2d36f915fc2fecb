"""/v1/embeddings with the official openai client: pooled hidden states of the served model,
unit length, the same vector for the same text however it is sent (alone or batched, text or
token ids, float or base64), closer for texts that mean the same, and a 400 naming the field for
what the server cannot do."""

from __future__ import annotations

import math

import openai
import pytest
import requests

from helpers import chat_model_path

TEXTS = ["The cat sat on the mat.", "A kitten was sitting on the rug.", "Stock markets fell sharply after the report."]


@pytest.fixture(scope="module")
def chat_server(start_server):
    return start_server("--model", chat_model_path(), "--pooling", "last")


def dot(a, b):
    return sum(x * y for x, y in zip(a, b))


@pytest.mark.parametrize("which", ["gemma", "smollm2-last"])
def test_embeddings_are_unit_vectors_that_group_similar_texts(which, server, chat_server):
    target = server if which == "gemma" else chat_server
    with openai.OpenAI(base_url=target.base_url, api_key="unused", max_retries=0, timeout=120) as c:
        model = c.models.list().data[0].id
        dims = {"gemma": 640, "smollm2-last": 576}[which]
        batched = c.embeddings.create(model=model, input=TEXTS, encoding_format="float")
        assert batched.model == model and batched.object == "list"
        assert [d.index for d in batched.data] == [0, 1, 2]
        vectors = [d.embedding for d in batched.data]
        assert all(len(v) == dims for v in vectors)
        assert all(abs(math.sqrt(dot(v, v)) - 1) < 1e-4 for v in vectors)
        assert dot(vectors[0], vectors[1]) > dot(vectors[0], vectors[2]), "the two sentences about cats are closer"
        tokens = requests.post(target.url + "/tokenize", json={"content": TEXTS[0], "add_special": True}, timeout=30).json()["tokens"]
        assert batched.usage.prompt_tokens >= 3 * len(tokens) - 6 and batched.usage.total_tokens == batched.usage.prompt_tokens
        # The same text alone, as token ids, and base64-encoded (the client's default, decoded by it).
        alone = c.embeddings.create(model=model, input=TEXTS[0], encoding_format="float").data[0].embedding
        by_ids = c.embeddings.create(model=model, input=[tokens], encoding_format="float").data[0].embedding
        base64 = c.embeddings.create(model=model, input=TEXTS[0]).data[0].embedding
        for other in (alone, by_ids, base64):
            assert max(abs(x - y) for x, y in zip(vectors[0], other)) < 1e-5


def test_what_cannot_be_done_is_a_400_naming_the_field(client, model_id):
    for kwargs, param in [({"input": "hi", "dimensions": 3}, "dimensions"), ({"input": ""}, "input"), ({"input": []}, "input"),
                          ({"input": [[]]}, "input"), ({"input": "hi", "extra_body": {"pooling": "cls"}}, "pooling"),
                          ({"input": [[-1]]}, "input")]:
        with pytest.raises(openai.BadRequestError) as refused:
            client.embeddings.create(model=model_id, encoding_format="float", **kwargs)
        assert refused.value.body["param"] == param, kwargs
    with pytest.raises(openai.NotFoundError):
        client.embeddings.create(model="nope", input="hi")


def test_an_embedded_prompt_serves_a_later_chat_from_the_cache(raw, server, model_id):
    """The input's KV is cached like a prompt's (in the caller's namespace): a completion of the
    same text reuses it."""
    text = "Embeddings and completions share one cache. " * 12
    r = raw.post(server.base_url + "/embeddings", json={"model": model_id, "input": text, "encoding_format": "float"}, timeout=60)
    assert r.status_code == 200, r.text
    c = raw.post(server.base_url + "/completions", json={"model": model_id, "prompt": text, "max_tokens": 2}, timeout=60)
    assert c.status_code == 200, c.text
    assert c.json()["usage"]["prompt_tokens_details"]["cached_tokens"] >= 96
