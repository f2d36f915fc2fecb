"""Tool calling with the official openai client, on the chat model (SmolLM2: its template knows no
tools, so the generic format: tools described in the system prompt, the reply a JSON envelope
forced by constrained decoding) and on Gemma 3: a call, its result, and the final answer, on
chat completions and the Responses API, streamed and not. Calls always parse and validate
against the tool's parameters; tool_choice is honoured; malformed tool input is a 400."""

from __future__ import annotations

import json

import jsonschema
import openai
import pytest

from helpers import chat_model_path

WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
ADD = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}
CHAT_TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "The current weather in a city",
                                      "parameters": WEATHER}},
    {"type": "function", "function": {"name": "add", "description": "Adds two integers", "parameters": ADD,
                                      "strict": True}},
]
RESPONSES_TOOLS = [{"type": "function", **tool["function"]} for tool in CHAT_TOOLS]
SCHEMAS = {"get_weather": WEATHER, "add": ADD}
ASK = [{"role": "user", "content": "What is the weather in Paris right now?"}]
RESULT = json.dumps({"temperature_c": 21, "sky": "sunny"})


@pytest.fixture(scope="module")
def chat_server(start_server):
    return start_server("--model", chat_model_path())


@pytest.fixture(scope="module")
def chat(chat_server):
    with openai.OpenAI(base_url=chat_server.base_url, api_key="unused", max_retries=0, timeout=300) as client:
        yield client, client.models.list().data[0].id


def check_call(name: str, arguments: str):
    assert name in SCHEMAS, name
    jsonschema.validate(json.loads(arguments), SCHEMAS[name])


def test_chat_round_trip_call_result_answer(chat):
    client, model = chat
    first = client.chat.completions.create(model=model, messages=ASK, tools=CHAT_TOOLS, tool_choice="required",
                                           parallel_tool_calls=False, max_tokens=120, seed=1)
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    assert len(choice.message.tool_calls) == 1  # parallel_tool_calls false: one call
    call = choice.message.tool_calls[0]
    assert call.type == "function" and call.id.startswith("call_")
    check_call(call.function.name, call.function.arguments)
    # The message as returned goes back as it is, then the result.
    messages = ASK + [choice.message.model_dump(exclude_none=True),
                      {"role": "tool", "tool_call_id": call.id, "content": RESULT}]
    final = client.chat.completions.create(model=model, messages=messages, tools=CHAT_TOOLS, tool_choice="none",
                                           max_tokens=60, seed=1)
    answer = final.choices[0]
    assert answer.message.tool_calls is None
    assert isinstance(answer.message.content, str) and answer.message.content.strip()
    alone = client.chat.completions.create(model=model, messages=ASK, tools=CHAT_TOOLS, tool_choice="none", max_tokens=1)
    assert final.usage.prompt_tokens > alone.usage.prompt_tokens + 10  # the call and its result are in the prompt
    # auto: the model chooses; whatever it chooses is well formed.
    auto = client.chat.completions.create(model=model, messages=messages, tools=CHAT_TOOLS, max_tokens=120, seed=2)
    message = auto.choices[0].message
    if message.tool_calls:
        assert auto.choices[0].finish_reason in ("tool_calls", "length")
        for c in message.tool_calls:
            check_call(c.function.name, c.function.arguments)
    else:
        assert isinstance(message.content, str)


def test_chat_streamed_calls_arrive_as_openai_deltas(chat):
    client, model = chat
    calls: dict[int, dict] = {}
    finish = None
    for chunk in client.chat.completions.create(model=model, messages=ASK, tools=CHAT_TOOLS, tool_choice="required",
                                                max_tokens=200, seed=3, stream=True):
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        for d in delta.tool_calls or []:
            entry = calls.setdefault(d.index, {"id": None, "name": None, "arguments": ""})
            if d.id:
                assert entry["id"] is None  # the id and name come once, first
                entry["id"], entry["name"] = d.id, d.function.name
                assert d.type == "function"
            entry["arguments"] += d.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    assert calls and finish in ("tool_calls", "length")
    for index, entry in sorted(calls.items()):
        assert entry["id"].startswith("call_")
        check_call(entry["name"], entry["arguments"])
    # The same call streamed and not, for the same seed.
    whole = client.chat.completions.create(model=model, messages=ASK, tools=CHAT_TOOLS, tool_choice="required",
                                           max_tokens=200, seed=3)
    assert [c.function.arguments for c in whole.choices[0].message.tool_calls] == \
        [calls[i]["arguments"] for i in sorted(calls)]


def test_named_tool_choice_forces_that_function(chat):
    client, model = chat
    r = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "What is 2 plus 3?"}],
                                       tools=CHAT_TOOLS, tool_choice={"type": "function", "function": {"name": "add"}},
                                       max_tokens=120, temperature=1.0, n=3, seed=5)
    for choice in r.choices:
        assert choice.message.tool_calls, choice.message
        for call in choice.message.tool_calls:
            assert call.function.name == "add"
            check_call("add", call.function.arguments)


def test_responses_round_trip_stored_and_streamed(chat, chat_server):
    client, model = chat
    first = client.responses.create(model=model, input=ASK[0]["content"], tools=RESPONSES_TOOLS, tool_choice="required",
                                    parallel_tool_calls=False, max_output_tokens=120)
    calls = [item for item in first.output if item.type == "function_call"]
    assert len(calls) == 1 and first.status == "completed"
    check_call(calls[0].name, calls[0].arguments)
    assert first.tool_choice == "required" and len(first.tools) == 2
    # The result continues the stored turn; the final answer is text.
    final = client.responses.create(model=model, previous_response_id=first.id, tools=RESPONSES_TOOLS,
                                    tool_choice="none", max_output_tokens=60,
                                    input=[{"type": "function_call_output", "call_id": calls[0].call_id, "output": RESULT}])
    assert final.output_text.strip()
    alone = client.responses.create(model=model, input=ASK[0]["content"], tools=RESPONSES_TOOLS, tool_choice="none",
                                    max_output_tokens=16, store=False)
    assert final.usage.input_tokens > alone.usage.input_tokens + 10  # the call and its result are in the prompt
    items = client.responses.input_items.list(final.id)
    assert [i.type for i in items.data] == ["function_call_output"]
    assert items.data[0].call_id == calls[0].call_id
    # Stored: the first turn reads back with its call.
    assert client.responses.retrieve(first.id).output[0].type == "function_call"
    # Streamed: the call's item, its arguments' delta and done, then the completed response.
    with client.responses.stream(model=model, input=ASK[0]["content"], tools=RESPONSES_TOOLS, tool_choice="required",
                                 parallel_tool_calls=False, max_output_tokens=200) as stream:
        types = [event.type for event in stream]
        done = stream.get_final_response()
    assert types[:2] == ["response.created", "response.in_progress"]
    assert "response.function_call_arguments.done" in types and types[-1] == "response.completed"
    streamed_calls = [item for item in done.output if item.type == "function_call"]
    assert streamed_calls
    for call in streamed_calls:
        check_call(call.name, call.arguments)


def test_responses_without_store_takes_calls_as_input_items(chat):
    client, model = chat
    call_id = "call_abc123"
    r = client.responses.create(model=model, store=False, tools=RESPONSES_TOOLS, tool_choice="none", max_output_tokens=40,
                                input=[{"role": "user", "content": ASK[0]["content"]},
                                       {"type": "function_call", "call_id": call_id, "name": "get_weather",
                                        "arguments": json.dumps({"city": "Paris"})},
                                       {"type": "function_call_output", "call_id": call_id, "output": RESULT}])
    assert r.status in ("completed", "incomplete")
    assert all(item.type == "message" for item in r.output)


def test_gemma_calls_parse_too(client, model_id):
    r = client.chat.completions.create(model=model_id, messages=ASK, tools=CHAT_TOOLS, tool_choice="required",
                                       temperature=0, max_tokens=200)
    for call in r.choices[0].message.tool_calls:
        check_call(call.function.name, call.function.arguments)


@pytest.mark.parametrize("kwargs,param", [
    ({"tools": CHAT_TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
    ({"tools": CHAT_TOOLS, "tool_choice": "sometimes"}, "tool_choice"),
    ({"tools": [{"type": "function", "function": {"name": "f", "strict": True,
                                                  "parameters": {"type": "object", "properties": {
                                                      "q": {"type": "number", "minimum": 1}}}}}]}, "tools"),
    ({"tools": [{"type": "function", "function": {"description": "no name"}}]}, "tools"),
    ({"tools": CHAT_TOOLS, "response_format": {"type": "json_object"}}, "response_format"),
])
def test_malformed_tool_requests_are_400(chat, kwargs, param):
    client, model = chat
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=model, messages=ASK, max_tokens=4, **kwargs)
    assert info.value.param == param


def test_tool_messages_need_their_call_id(chat):
    client, model = chat
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=model, max_tokens=4,
                                       messages=ASK + [{"role": "tool", "content": "21 C"}])
    assert "tool_call_id" in info.value.param
