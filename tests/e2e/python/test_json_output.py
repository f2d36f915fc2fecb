"""response_format json_object / json_schema (chat) and text.format (Responses): every reply that
ends is one JSON object (valid against its schema), whole or streamed, greedy or sampled, on Gemma 3 and on the chat model
(a small model may also loop inside the object until max_tokens: finish_reason "length", the text
a prefix of an object); the chat model ends a simple one."""

from __future__ import annotations

import ast
import json
import re

import jsonschema
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


SCHEMAS = [
    ("cat", 'Write a JSON object for a cat named Tom who is 3.',
     {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0, "maximum": 30},
                                       "lives": {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 10}},
      "required": ["name", "age", "lives"], "additionalProperties": False}),
    ("city", "Give the capital of France and its population as JSON.",
     {"type": "object", "properties": {"city": {"type": "string"}, "population": {"type": "number"},
                                       "is_capital": {"type": "boolean"}},
      "required": ["city", "population", "is_capital"], "additionalProperties": False}),
    ("colour", "Pick a primary colour and say whether it is warm.",
     {"type": "object", "properties": {"colour": {"enum": ["red", "yellow", "blue"]}, "warm": {"type": "boolean"}},
      "required": ["colour", "warm"]}),
    ("list", "List two fruits as JSON.",
     {"type": "object", "properties": {"fruits": {"type": "array", "items": {"type": "string"}, "minItems": 2,
                                                  "maxItems": 2}},
      "required": ["fruits"]}),
    ("nested", "Describe a book: its title and its author's name and birth year.",
     {"type": "object", "properties": {
         "title": {"type": "string"},
         "author": {"type": "object", "properties": {"name": {"type": "string"}, "born": {"type": "integer"}},
                    "required": ["name", "born"], "additionalProperties": False},
         "note": {"type": "null"}},
      "required": ["title", "author"]}),
    ("event", "Describe a meeting: its date, a 3-letter room code and a short title.",
     {"type": "object", "properties": {"date": {"type": "string", "format": "date"},
                                       "room": {"type": "string", "pattern": "^[A-Z]{3}$"},
                                       "title": {"type": "string", "minLength": 1, "maxLength": 20}},
      "required": ["date", "room", "title"]}),
    ("contact", "Give one way to reach Ann Lee: her email address or her phone number.",
     {"type": "object", "properties": {"contact": {"anyOf": [
         {"type": "object", "properties": {"email": {"type": "string"}}, "required": ["email"]},
         {"type": "object", "properties": {"phone": {"type": "string"}}, "required": ["phone"]}]}},
      "required": ["contact"]}),
]


@pytest.mark.parametrize("which", ["gemma", "smollm2"])
def test_json_schema_outputs_validate(which, server, chat_server):
    url = (server if which == "gemma" else chat_server).base_url
    ended = 0
    with openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=300) as client:
        model = client.models.list().data[0].id
        for name, question, schema in SCHEMAS:
            fmt = {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}
            for temperature in (0, 0.9):
                r = client.chat.completions.create(model=model, temperature=temperature, seed=11, max_tokens=160,
                                                   messages=[ASK[0], {"role": "user", "content": question}],
                                                   response_format=fmt)
                choice = r.choices[0]
                if choice.finish_reason == "stop":
                    jsonschema.validate(json.loads(choice.message.content), schema)
                    ended += 1
        # The Responses API's flattened text.format.
        turn = client.responses.create(model=model, input=SCHEMAS[0][1], instructions=ASK[0]["content"], temperature=0,
                                       max_output_tokens=160,
                                       text={"format": {"type": "json_schema", "name": "cat", "schema": SCHEMAS[0][2]}})
        if turn.status == "completed":
            jsonschema.validate(json.loads(turn.output_text), SCHEMAS[0][2])
            ended += 1
    if which == "smollm2":
        assert ended >= 8, ended


@pytest.mark.parametrize("pattern", [r"(yes|no)", r"[0-9]{3}-[0-9]{4}", r"[A-Z][a-z]+( [A-Z][a-z]+)?\.",
                                     r"(\d+, ){2}\d+"])
def test_grammar_regex_outputs_match_whole(client, model_id, chat_server, pattern):
    with openai.OpenAI(base_url=chat_server.base_url, api_key="unused", max_retries=0, timeout=300) as chat:
        chat_model = chat.models.list().data[0].id
        for c, model in ((client, model_id), (chat, chat_model)):
            r = c.chat.completions.create(model=model, messages=[{"role": "user", "content": "Answer briefly."}],
                                          max_tokens=40, temperature=0.8, seed=4, n=2,
                                          extra_body={"grammar": {"type": "regex", "regex": pattern}})
            for choice in r.choices:
                if choice.finish_reason == "stop":
                    assert re.fullmatch(pattern, choice.message.content), (pattern, choice.message.content)
            streamed = c.completions.create(model=model, prompt="Q: answer? A:", max_tokens=40, temperature=0, stream=True,
                                            extra_body={"grammar": {"type": "regex", "regex": pattern}})
            chunks = list(streamed)
            text = "".join(ch.choices[0].text for ch in chunks if ch.choices)
            if any(ch.choices and ch.choices[0].finish_reason == "stop" for ch in chunks):
                assert re.fullmatch(pattern, text), (pattern, text)


GBNF_CASES = [
    # (grammar, how to check a whole output)
    ('root ::= ("yes" | "no") ", because " [a-z ]{3,30} "."',
     lambda text: re.fullmatch(r"(yes|no), because [a-z ]{3,30}\.", text)),
    # At most four terms a level: unbounded sums made the small models ramble past max_tokens.
    ('root ::= expr\nexpr ::= term (("+" | "-") term){0,3}\nterm ::= [1-9] [0-9]{0,2} | "(" expr ")"\n',
     lambda text: re.fullmatch(r"[0-9+\-()]+", text) and ast.parse(text, mode="eval")),
]


@pytest.mark.parametrize("case", range(len(GBNF_CASES)))
def test_gbnf_grammar_outputs_are_derived_whole(client, model_id, chat_server, case):
    """llama-server's GBNF strings, and the same as {"type": "gbnf", "gbnf": ...}; a recursive
    grammar (arithmetic with nested parentheses) included."""
    grammar, check = GBNF_CASES[case]
    with openai.OpenAI(base_url=chat_server.base_url, api_key="unused", max_retries=0, timeout=300) as chat:
        chat_model = chat.models.list().data[0].id
        ended = 0
        for c, model in ((client, model_id), (chat, chat_model)):
            for form in (grammar, {"type": "gbnf", "gbnf": grammar}):
                r = c.chat.completions.create(model=model, messages=[{"role": "user", "content": "Answer briefly."}],
                                              max_tokens=60, temperature=0.8, seed=5, n=2, extra_body={"grammar": form})
                for choice in r.choices:
                    if choice.finish_reason == "stop":
                        assert check(choice.message.content), (grammar, choice.message.content)
                        ended += 1
            greedy = c.completions.create(model=model, prompt="Q: answer? A:", max_tokens=60, temperature=0,
                                          extra_body={"grammar": grammar})
            if greedy.choices[0].finish_reason == "stop":
                assert check(greedy.choices[0].text), (grammar, greedy.choices[0].text)
                ended += 1
        assert ended >= 3, "too few outputs ended to check anything"


def test_grammar_errors_name_the_field(client, model_id):
    for grammar in ('root ::= item', 'root ::= root "a" | "b"', 'root ::= "a', {"type": "regex", "regex": "(a"},
                    {"type": "gbnf", "grammar": "x"}, {"type": "regex", "regex": "(?=a)"}, 7):
        with pytest.raises(openai.BadRequestError) as info:
            client.chat.completions.create(model=model_id, messages=ASK, max_tokens=4, extra_body={"grammar": grammar})
        assert info.value.param == "grammar"
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=model_id, messages=ASK, max_tokens=4, response_format={"type": "json_object"},
                                       extra_body={"grammar": {"type": "regex", "regex": "a"}})
    assert info.value.param == "grammar"


def test_unsupported_schemas_are_refused_by_keyword(client, model_id):
    for schema, keyword in [({"type": "object", "properties": {"a": {"type": "string", "format": "hostname"}}}, "hostname"),
                            ({"type": "object", "properties": {"a": {"type": "number", "minimum": 3}}}, "minimum"),
                            ({"type": "object", "properties": {"a": {"type": "string", "pattern": "(a)\\1"}}}, "\\1"),
                            ({"type": "array", "items": {"type": "string"}}, "object")]:
        with pytest.raises(openai.BadRequestError) as info:
            client.chat.completions.create(model=model_id, messages=ASK, max_tokens=8, response_format={
                "type": "json_schema", "json_schema": {"name": "x", "schema": schema}})
        assert info.value.param == "response_format"
        assert keyword in info.value.message


def test_pydantic_models_parse_with_the_official_client(chat_server):
    """client.chat.completions.parse(response_format=Model): the client sends the model's strict
    schema (nested models as $defs and $ref) and parses the reply into the model."""
    from typing import Literal, Optional

    from pydantic import BaseModel

    class Point(BaseModel):
        x: int
        y: int

    class Segment(BaseModel):
        start: Point
        end: Point
        colour: Literal["red", "green"]
        label: Optional[str] = None

    with openai.OpenAI(base_url=chat_server.base_url, api_key="unused", max_retries=0, timeout=300) as chat:
        model = chat.models.list().data[0].id
        parsed = 0
        for seed in range(4):
            try:
                r = chat.chat.completions.parse(model=model, response_format=Segment, temperature=0.7, seed=seed, max_tokens=120,
                                                messages=[{"role": "user", "content": "Give a red segment from (1, 2) to (3, 4) as JSON."}])
            except openai.LengthFinishReasonError:  # the client's way of saying "not ended"
                continue
            if r.choices[0].finish_reason == "stop":
                segment = r.choices[0].message.parsed
                assert isinstance(segment, Segment) and isinstance(segment.start, Point)
                parsed += 1
        assert parsed >= 2, "too few replies ended to check anything"
