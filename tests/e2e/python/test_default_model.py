"""The first experience: `mnemo serve` with no model named serves the instruct model
(SmolLM2-135M-Instruct Q4_1, installed by scripts/setup.sh), whose chat template is in its file,
and a short question gets a coherent answer through the API and the web page.

With no system message the template adds its own long one, after which this 135M model answers
"What is the capital of France?" with a list of French words: llama.cpp on the same file gives
the same (measured: the greedy replies agree for 8 tokens, then part at a near tie). A plain
system prompt, which the page sends by default, gets "The capital of France is Paris." from both."""

from __future__ import annotations

import openai
import pytest
import requests
from selenium.webdriver.common.by import By

from helpers import chat_model_path
from test_web_ui import browser, open_page, send_message, set_setting, text_of, wait_finished  # noqa: F401

# Greedy on a 135M model: the bare question leads "The" over "La" by 0.19 nats (0.13 in llama.cpp),
# inside what the numerics of another ISA or a compressed KV tier may move; asked for one short
# sentence, every token of the answer leads by more than 0.9.
QUESTION = "What is the capital of France? Answer in one short sentence."
SYSTEM = {"role": "system", "content": "You are a helpful assistant."}


@pytest.fixture(scope="module")
def chat_server(start_server):
    return start_server(default_model=True)


@pytest.fixture(scope="module")
def chat_client(chat_server):
    with openai.OpenAI(base_url=chat_server.base_url, api_key="unused", max_retries=0, timeout=120) as c:
        yield c


def served_model(server) -> dict:
    models = requests.get(server.base_url + "/models", timeout=30).json()["data"]
    assert len(models) == 1
    return models[0]


def test_the_default_is_the_instruct_model(chat_server):
    assert "SmolLM2" in served_model(chat_server)["id"] or "smollm2" in served_model(chat_server)["id"].lower()
    with open(chat_model_path(), "rb") as f:
        assert f.read(4) == b"GGUF"


def test_a_short_question_gets_a_coherent_answer(chat_server, chat_client):
    model = served_model(chat_server)["id"]
    r = chat_client.chat.completions.create(model=model, messages=[SYSTEM, {"role": "user", "content": QUESTION}],
                                            temperature=0, max_tokens=24)
    assert "Paris" in r.choices[0].message.content
    assert r.choices[0].finish_reason == "stop"  # the template's end-of-turn token ends the reply
    turn = chat_client.responses.create(model=model, instructions=SYSTEM["content"], input=QUESTION, temperature=0,
                                        max_output_tokens=24)
    assert "Paris" in turn.output_text
    follow = chat_client.responses.create(model=model, instructions=SYSTEM["content"], temperature=0,
                                          input="And what is the capital of Germany?", max_output_tokens=24,
                                          previous_response_id=turn.id)
    assert "Berlin" in follow.output_text


def test_the_page_answers_on_the_default_model(browser, chat_server):  # noqa: F811  (browser: a fixture)
    open_page(browser, chat_server.url, served_model(chat_server)["id"])
    set_setting(browser, "temperature", "0")
    set_setting(browser, "max-tokens", "24")
    browser.find_element(By.ID, "settings-toggle").click()
    bubble = send_message(browser, QUESTION, 1)
    assert wait_finished(browser, bubble) == "done"
    assert "Paris" in text_of(bubble.find_element(By.CSS_SELECTOR, ".content"))
