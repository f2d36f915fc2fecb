"""A server started with --api-key: /v1 needs 'Authorization: Bearer KEY'; /health and the page don't."""

from __future__ import annotations

import openai
import pytest
import requests

from helpers import API_KEY as KEY


def test_wrong_key_is_401(auth_server):
    with openai.OpenAI(base_url=auth_server.base_url, api_key="sk-wrong", max_retries=0, timeout=30) as client:
        with pytest.raises(openai.AuthenticationError) as info:
            client.chat.completions.create(model="any", messages=[{"role": "user", "content": "Hi"}], max_tokens=1)
        assert info.value.status_code == 401
        assert info.value.code == "invalid_api_key"
        # The same client (and connection pool) again: the refused request's body did not linger.
        with pytest.raises(openai.AuthenticationError):
            client.models.list()
        with pytest.raises(openai.AuthenticationError):
            client.completions.create(model="any", prompt="Hi", max_tokens=1)


@pytest.mark.parametrize("headers", [{}, {"Authorization": KEY}, {"Authorization": "Bearer"},
                                     {"Authorization": "Basic " + KEY}])
def test_missing_or_malformed_key_is_401(auth_server, headers):
    r = requests.post(auth_server.base_url + "/completions", json={"prompt": "Hi", "max_tokens": 1}, headers=headers,
                      timeout=30)
    assert r.status_code == 401, r.text
    error = r.json()["error"]
    assert error["code"] == "invalid_api_key" and error["message"]


def test_right_key_works(auth_server):
    with openai.OpenAI(base_url=auth_server.base_url, api_key=KEY, max_retries=0, timeout=60) as client:
        model_id = client.models.list().data[0].id
        r = client.completions.create(model=model_id, prompt="Hi", max_tokens=2, temperature=0)
        assert r.usage.completion_tokens == 2


def test_health_and_page_need_no_key(auth_server):
    assert requests.get(auth_server.url + "/health", timeout=10).status_code == 200
    page = requests.get(auth_server.url + "/", timeout=10)
    assert page.status_code == 200 and "<html" in page.text
