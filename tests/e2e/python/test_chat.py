"""POST /v1/chat/completions through the official openai client: whole and streamed responses,
n > 1, stop strings, seeds, greedy decoding, usage, logprobs and token limits."""

from __future__ import annotations

import math

import pytest

from helpers import pick_stop_string

QUESTION = [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}]
ESSAY = [{"role": "user", "content": "Write a long essay about the history of the Roman Empire."}]


def stream_chat(client, **kwargs):
    """Runs a streamed chat completion; returns (chunks, {index: text}, {index: finish_reason})."""
    chunks = list(client.chat.completions.create(stream=True, **kwargs))
    texts: dict[int, str] = {}
    reasons: dict[int, str] = {}
    for chunk in chunks:
        for choice in chunk.choices:
            texts.setdefault(choice.index, "")
            if choice.delta.content:
                texts[choice.index] += choice.delta.content
            if choice.finish_reason is not None:
                assert choice.index not in reasons, f"choice {choice.index} finished twice"
                reasons[choice.index] = choice.finish_reason
    return chunks, texts, reasons


def test_whole_response_has_openai_shape(client, model_id):
    r = client.chat.completions.create(model=model_id, messages=QUESTION, temperature=0, max_tokens=12)
    assert r.object == "chat.completion"
    assert r.id.startswith("chatcmpl-")
    assert r.model == model_id
    assert r.created > 0
    assert len(r.choices) == 1
    choice = r.choices[0]
    assert choice.index == 0
    assert choice.message.role == "assistant"
    assert isinstance(choice.message.content, str) and choice.message.content.strip()
    assert choice.finish_reason in ("stop", "length")
    assert choice.logprobs is None
    assert r.usage.prompt_tokens > 0
    assert 0 < r.usage.completion_tokens <= 12
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_model_may_be_omitted(server, raw):
    r = raw.post(server.base_url + "/chat/completions",
                 json={"messages": QUESTION, "temperature": 0, "max_tokens": 4}, timeout=60)
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"]


def test_stream_matches_whole_response(client, model_id):
    whole = client.chat.completions.create(model=model_id, messages=QUESTION, temperature=0, max_tokens=16)
    chunks, texts, reasons = stream_chat(client, model=model_id, messages=QUESTION, temperature=0, max_tokens=16)
    assert texts == {0: whole.choices[0].message.content}
    assert reasons == {0: whole.choices[0].finish_reason}
    assert chunks[0].choices[0].delta.role == "assistant"
    assert {c.id for c in chunks} == {chunks[0].id}
    assert chunks[0].id.startswith("chatcmpl-")
    assert all(c.object == "chat.completion.chunk" and c.model == model_id for c in chunks)
    # The finish reason comes in the last chunk, after every piece of content.
    assert chunks[-1].choices[0].finish_reason == whole.choices[0].finish_reason
    assert all(c.usage is None for c in chunks)  # no include_usage: no usage chunk


def test_multi_turn_sends_the_whole_history(client, model_id):
    single = client.chat.completions.create(model=model_id, messages=QUESTION, temperature=0, max_tokens=4)
    history = [
        {"role": "system", "content": "You are a terse assistant."},
        *QUESTION,
        {"role": "assistant", "content": single.choices[0].message.content},
        {"role": "user", "content": "And of Italy?"},
    ]
    multi = client.chat.completions.create(model=model_id, messages=history, temperature=0, max_tokens=8)
    assert multi.choices[0].message.content.strip()
    # The later turns are in the prompt.
    assert multi.usage.prompt_tokens > single.usage.prompt_tokens + 8


def test_n_choices_differ_and_are_indexed(client, model_id):
    r = client.chat.completions.create(model=model_id, messages=ESSAY, temperature=1.0, max_tokens=12, n=3, seed=11)
    assert sorted(c.index for c in r.choices) == [0, 1, 2]
    texts = [c.message.content for c in r.choices]
    assert all(t for t in texts)
    assert len(set(texts)) >= 2, texts
    assert r.usage.completion_tokens <= 3 * 12
    assert r.usage.completion_tokens >= len(r.choices)


def test_n_choices_stream(client, model_id):
    chunks, texts, reasons = stream_chat(client, model=model_id, messages=ESSAY, temperature=1.0, max_tokens=10, n=2,
                                         seed=5)
    assert set(texts) == {0, 1}
    assert set(reasons) == {0, 1}
    assert texts[0] and texts[1] and texts[0] != texts[1]
    # The same request, whole, gives the same choices (sampling depends only on seed and index).
    whole = client.chat.completions.create(model=model_id, messages=ESSAY, temperature=1.0, max_tokens=10, n=2, seed=5)
    assert {c.index: c.message.content for c in whole.choices} == texts


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_stop_string_ends_the_output_before_it(client, model_id, stream):
    baseline = client.chat.completions.create(model=model_id, messages=ESSAY, temperature=0, max_tokens=24)
    text = baseline.choices[0].message.content
    assert len(text) > 12, text
    stop, expected = pick_stop_string(text)
    kwargs = dict(model=model_id, messages=ESSAY, temperature=0, max_tokens=24, stop=["never-occurs-xyzzy", stop])
    if stream:
        _, texts, reasons = stream_chat(client, **kwargs)
        out, reason = texts[0], reasons[0]
    else:
        r = client.chat.completions.create(**kwargs)
        out, reason = r.choices[0].message.content, r.choices[0].finish_reason
    assert stop not in out
    assert out == expected
    assert reason == "stop"


def test_seed_makes_sampling_reproducible(client, model_id):
    def sample(seed):
        r = client.chat.completions.create(model=model_id, messages=ESSAY, temperature=0.8, max_tokens=16, seed=seed)
        return r.choices[0].message.content

    first = sample(1234)
    assert sample(1234) == first
    assert len({first, sample(1), sample(2), sample(3)}) >= 2


def test_requests_without_a_seed_sample_differently(client, model_id):
    # A random seed per request when none is given: asking again gives a new answer.
    outs = {
        client.chat.completions.create(model=model_id, messages=ESSAY, temperature=1.0, max_tokens=16)
        .choices[0].message.content
        for _ in range(3)
    }
    assert len(outs) >= 2


def test_greedy_is_reproducible(client, model_id):
    outs = {
        client.chat.completions.create(model=model_id, messages=ESSAY, temperature=0, max_tokens=12, seed=s)
        .choices[0].message.content
        for s in (1, 2)
    }
    assert len(outs) == 1


def test_usage_counts_generated_tokens(client, model_id):
    r = client.chat.completions.create(model=model_id, messages=ESSAY, temperature=0, max_tokens=7, logprobs=True)
    choice = r.choices[0]
    assert choice.finish_reason == "length"
    assert r.usage.completion_tokens == 7
    assert len(choice.logprobs.content) == 7  # one entry per generated token
    assert r.usage.prompt_tokens > 0
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    cached = r.usage.prompt_tokens_details.cached_tokens
    assert isinstance(cached, int) and 0 <= cached <= r.usage.prompt_tokens


@pytest.mark.parametrize("field,limit", [("max_tokens", 3), ("max_completion_tokens", 5)])
def test_token_limit_fields_are_honoured(client, model_id, field, limit):
    r = client.chat.completions.create(model=model_id, messages=ESSAY, temperature=0, **{field: limit})
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == limit


def test_include_usage_adds_a_final_usage_chunk(client, model_id):
    whole = client.chat.completions.create(model=model_id, messages=ESSAY, temperature=0, max_tokens=6)
    chunks, texts, _ = stream_chat(client, model=model_id, messages=ESSAY, temperature=0, max_tokens=6,
                                   stream_options={"include_usage": True})
    last = chunks[-1]
    assert last.choices == []
    assert last.usage is not None
    assert all(c.usage is None for c in chunks[:-1])
    assert last.usage.prompt_tokens == whole.usage.prompt_tokens
    assert last.usage.completion_tokens == whole.usage.completion_tokens == 6
    assert last.usage.total_tokens == last.usage.prompt_tokens + last.usage.completion_tokens
    assert texts[0] == whole.choices[0].message.content


def check_chat_logprob_entry(entry, top_n: int, greedy: bool):
    assert isinstance(entry.token, str)
    assert entry.logprob <= 0 and math.isfinite(entry.logprob)
    assert entry.bytes and all(0 <= b < 256 for b in entry.bytes)
    if "\ufffd" not in entry.token:  # a whole UTF-8 piece: bytes are its encoding
        assert bytes(entry.bytes) == entry.token.encode("utf-8")
    assert len(entry.top_logprobs) == top_n
    values = [alt.logprob for alt in entry.top_logprobs]
    assert all(v <= 0 for v in values)
    assert values == sorted(values, reverse=True)
    if greedy:  # the chosen token is the most likely one
        assert entry.token == entry.top_logprobs[0].token
        assert entry.logprob == pytest.approx(values[0], abs=1e-5)


def test_chat_logprobs_have_the_right_shape(client, model_id):
    r = client.chat.completions.create(model=model_id, messages=QUESTION, temperature=0, max_tokens=6, logprobs=True,
                                       top_logprobs=2)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens
    for entry in content:
        check_chat_logprob_entry(entry, 2, greedy=True)
    assert "".join(e.token for e in content).strip() == r.choices[0].message.content.strip()


def test_chat_logprobs_stream(client, model_id):
    chunks, _, _ = stream_chat(client, model=model_id, messages=QUESTION, temperature=0, max_tokens=5, logprobs=True,
                               top_logprobs=2, stream_options={"include_usage": True})
    entries = [e for c in chunks for ch in c.choices if ch.logprobs and ch.logprobs.content for e in ch.logprobs.content]
    assert len(entries) == chunks[-1].usage.completion_tokens > 0
    for entry in entries:
        check_chat_logprob_entry(entry, 2, greedy=True)
