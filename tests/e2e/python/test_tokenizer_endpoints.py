"""The tokenizer over HTTP in llama-server's shape (POST /tokenize, POST /detokenize) and one
model's card (GET /v1/models/{id}): round trips on the real model, refusals with the field named,
and the API key required like the rest of the API."""

from __future__ import annotations

import requests

from helpers import API_KEY

TEXT = "Stateful serving keeps a conversation's KV between turns: <start_of_turn>user"


def test_tokenize_and_detokenize_round_trip(server, client):
    r = requests.post(server.url + "/tokenize", json={"content": TEXT}, timeout=30)
    assert r.status_code == 200, r.text
    tokens = r.json()["tokens"]
    assert tokens and all(isinstance(t, int) for t in tokens)
    # Gemma's <start_of_turn> is parsed as the one special token it names, unless told not to.
    pieces = requests.post(server.url + "/tokenize", json={"content": TEXT, "with_pieces": True}, timeout=30).json()
    turn = [p["id"] for p in pieces["tokens"] if p["piece"] == "<start_of_turn>"]
    assert len(turn) == 1 and turn[0] in tokens
    plain = requests.post(server.url + "/tokenize", json={"content": TEXT, "parse_special": False}, timeout=30).json()
    assert turn[0] not in plain["tokens"] and len(plain["tokens"]) > len(tokens)
    back = requests.post(server.url + "/detokenize", json={"tokens": tokens}, timeout=30)
    assert back.status_code == 200, back.text
    assert back.json()["content"] == TEXT
    # The same tokens the completions API counts for the text.
    usage = client.completions.create(model=client.models.list().data[0].id, prompt=TEXT, max_tokens=1).usage
    with_bos = requests.post(server.url + "/tokenize", json={"content": TEXT, "add_special": True}, timeout=30).json()
    assert usage.prompt_tokens == len(with_bos["tokens"]) == len(tokens) + 1


def test_tokenize_with_pieces(server):
    r = requests.post(server.url + "/tokenize", json={"content": "Hello world", "with_pieces": True}, timeout=30)
    assert r.status_code == 200, r.text
    pieces = r.json()["tokens"]
    assert "".join(p["piece"] for p in pieces) == "Hello world"
    assert all(isinstance(p["id"], int) for p in pieces)


def test_tokenizer_endpoints_refuse_bad_input(server):
    for path, body, param in [("/tokenize", {}, "content"), ("/tokenize", {"content": 5}, "content"),
                              ("/tokenize", {"content": "x", "add_special": "yes"}, "add_special"),
                              ("/tokenize", {"content": "x", "extra": 1}, "extra"),
                              ("/detokenize", {"tokens": "x"}, "tokens"), ("/detokenize", {"tokens": [-1]}, "tokens"),
                              ("/detokenize", {"tokens": [10 ** 9]}, "tokens")]:
        r = requests.post(server.url + path, json=body, timeout=30)
        assert r.status_code == 400, (path, body, r.text)
        assert r.json()["error"]["param"] == param


def test_a_model_card_by_id(server, model_id):
    r = requests.get(server.base_url + "/models/" + model_id, timeout=30)
    assert r.status_code == 200, r.text
    assert r.json()["id"] == model_id and r.json()["object"] == "model"
    missing = requests.get(server.base_url + "/models/no-such-model", timeout=30)
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "model_not_found"


def test_the_tokenizer_needs_the_api_key_when_keys_are_set(auth_server):
    assert requests.post(auth_server.url + "/tokenize", json={"content": "x"}, timeout=30).status_code == 401
    ok = requests.post(auth_server.url + "/tokenize", json={"content": "x"}, timeout=30,
                       headers={"Authorization": f"Bearer {API_KEY}"})
    assert ok.status_code == 200, ok.text
