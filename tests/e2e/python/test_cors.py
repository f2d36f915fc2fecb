"""`serve --cors-origin`: a browser page of an allowed origin may call the API (its preflight is
answered without a key, its requests get Access-Control-Allow-Origin); other origins get no CORS
header, and without the flag no request gets one."""

from __future__ import annotations

import pytest
import requests

from helpers import API_KEY

ALLOWED = "http://app.example"


@pytest.fixture(scope="module")
def cors_server(start_server):
    return start_server("--cors-origin", ALLOWED, "--api-key", API_KEY)


def test_a_preflight_of_an_allowed_origin_is_answered_without_a_key(cors_server):
    r = requests.options(cors_server.base_url + "/chat/completions", timeout=30,
                         headers={"Origin": ALLOWED, "Access-Control-Request-Method": "POST",
                                  "Access-Control-Request-Headers": "authorization, content-type"})
    assert r.status_code == 204, r.text
    assert r.headers["Access-Control-Allow-Origin"] == ALLOWED
    assert "POST" in r.headers["Access-Control-Allow-Methods"]
    assert "Authorization" in r.headers["Access-Control-Allow-Headers"]


def test_requests_of_an_allowed_origin_carry_the_header_and_still_need_the_key(cors_server):
    auth = {"Authorization": f"Bearer {API_KEY}"}
    ok = requests.get(cors_server.base_url + "/models", headers={"Origin": ALLOWED, **auth}, timeout=30)
    assert ok.status_code == 200
    assert ok.headers["Access-Control-Allow-Origin"] == ALLOWED
    no_key = requests.get(cors_server.base_url + "/models", headers={"Origin": ALLOWED}, timeout=30)
    assert no_key.status_code == 401
    other = requests.get(cors_server.base_url + "/models", headers={"Origin": "http://evil.example", **auth}, timeout=30)
    assert "Access-Control-Allow-Origin" not in other.headers
    # A preflight from an origin not allowed is not answered as one (no key: refused).
    assert requests.options(cors_server.base_url + "/models", headers={"Origin": "http://evil.example"},
                            timeout=30).status_code == 401


def test_without_the_flag_no_cors_header(server):
    r = requests.get(server.base_url + "/models", headers={"Origin": ALLOWED}, timeout=30)
    assert "Access-Control-Allow-Origin" not in r.headers
