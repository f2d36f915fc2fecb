"""POST /v1/completions through the official openai client."""

from __future__ import annotations

import math
import time

import openai
import pytest
import requests

from helpers import pick_stop_string

PROMPT = "The history of the Roman Empire begins"


def stream_completion(client, **kwargs):
    chunks = list(client.completions.create(stream=True, **kwargs))
    texts: dict[int, str] = {}
    reasons: dict[int, str] = {}
    for chunk in chunks:
        for choice in chunk.choices:
            texts[choice.index] = texts.get(choice.index, "") + (choice.text or "")
            if choice.finish_reason is not None:
                assert choice.index not in reasons, f"choice {choice.index} finished twice"
                reasons[choice.index] = choice.finish_reason
    return chunks, texts, reasons


def test_whole_response_has_openai_shape(client, model_id):
    r = client.completions.create(model=model_id, prompt=PROMPT, temperature=0, max_tokens=8)
    assert r.object == "text_completion"
    assert r.id.startswith("cmpl-")
    assert r.model == model_id
    assert len(r.choices) == 1
    choice = r.choices[0]
    assert choice.index == 0
    assert isinstance(choice.text, str) and choice.text.strip()
    assert choice.finish_reason == "length"
    assert r.usage.completion_tokens == 8
    assert r.usage.prompt_tokens > 0
    assert r.usage.total_tokens == r.usage.prompt_tokens + 8
    assert r.usage.prompt_tokens_details is None or r.usage.prompt_tokens_details.cached_tokens >= 0


def test_stream_matches_whole_response(client, model_id):
    whole = client.completions.create(model=model_id, prompt=PROMPT, temperature=0, max_tokens=10)
    chunks, texts, reasons = stream_completion(client, model=model_id, prompt=PROMPT, temperature=0, max_tokens=10,
                                               stream_options={"include_usage": True})
    assert texts == {0: whole.choices[0].text}
    assert reasons == {0: "length"}
    assert {c.id for c in chunks} == {chunks[0].id}
    assert chunks[0].id.startswith("cmpl-")
    assert all(c.object == "text_completion" for c in chunks)
    usage = chunks[-1].usage
    assert chunks[-1].choices == []
    assert usage.completion_tokens == 10
    assert usage.prompt_tokens == whole.usage.prompt_tokens
    assert usage.total_tokens == usage.prompt_tokens + 10


def test_prompt_as_token_ids(client, model_id):
    r = client.completions.create(model=model_id, prompt=[2, 818, 5279, 529], temperature=0, max_tokens=4)
    assert r.usage.prompt_tokens == 4
    assert r.usage.completion_tokens == 4
    assert r.choices[0].text


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_stop_string(client, model_id, stream):
    baseline = client.completions.create(model=model_id, prompt=PROMPT, temperature=0, max_tokens=24).choices[0].text
    stop, expected = pick_stop_string(baseline)
    kwargs = dict(model=model_id, prompt=PROMPT, temperature=0, max_tokens=24, stop=stop)
    if stream:
        _, texts, reasons = stream_completion(client, **kwargs)
        out, reason = texts[0], reasons[0]
    else:
        r = client.completions.create(**kwargs)
        out, reason = r.choices[0].text, r.choices[0].finish_reason
    assert stop not in out
    assert out == expected
    assert reason == "stop"


def test_n_choices(client, model_id):
    r = client.completions.create(model=model_id, prompt=PROMPT, temperature=1.0, max_tokens=10, n=3, seed=3)
    assert sorted(c.index for c in r.choices) == [0, 1, 2]
    assert len({c.text for c in r.choices}) >= 2
    _, texts, reasons = stream_completion(client, model=model_id, prompt=PROMPT, temperature=1.0, max_tokens=10, n=3,
                                          seed=3)
    assert texts == {c.index: c.text for c in r.choices}
    assert set(reasons) == {0, 1, 2}


def test_seed_and_greedy_reproducible(client, model_id):
    def run(**kw):
        return client.completions.create(model=model_id, prompt=PROMPT, max_tokens=12, **kw).choices[0].text

    assert run(temperature=0.8, seed=99) == run(temperature=0.8, seed=99)
    assert run(temperature=0) == run(temperature=0, seed=5)


def test_logprobs_have_the_right_shape(client, model_id):
    r = client.completions.create(model=model_id, prompt=PROMPT, temperature=0, max_tokens=6, logprobs=2)
    lp = r.choices[0].logprobs
    assert r.usage.completion_tokens == 6
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 6
    assert "".join(lp.tokens) == r.choices[0].text
    for token, logprob, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert isinstance(token, str)
        assert logprob <= 0 and math.isfinite(logprob)
        assert 1 <= len(top) <= 2
        assert all(v <= 0 for v in top.values())
        # Greedy: the chosen token is the most likely one.
        assert token in top
        assert logprob == pytest.approx(max(top.values()), abs=1e-5)


def test_max_tokens_is_honoured(client, model_id):
    for limit in (1, 5):
        r = client.completions.create(model=model_id, prompt=PROMPT, temperature=0, max_tokens=limit)
        assert r.usage.completion_tokens == limit
        assert r.choices[0].finish_reason == "length"


def test_logit_bias_forces_and_bans_a_token(server, client, model_id):

    banana = requests.post(server.url + "/tokenize", json={"content": " banana"}, timeout=30).json()["tokens"]
    assert len(banana) == 1
    forced = client.completions.create(model=model_id, prompt=PROMPT, temperature=0, max_tokens=2,
                                       logit_bias={str(banana[0]): 100})
    assert forced.choices[0].text.startswith(" banana")
    free = client.completions.create(model=model_id, prompt=PROMPT, temperature=0, max_tokens=1)
    first = requests.post(server.url + "/tokenize", json={"content": free.choices[0].text}, timeout=30).json()["tokens"]
    banned = client.completions.create(model=model_id, prompt=PROMPT, temperature=0, max_tokens=1,
                                       logit_bias={str(first[0]): -100})
    assert banned.choices[0].text != free.choices[0].text
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model=model_id, prompt=PROMPT, max_tokens=1, logit_bias={"999999999": 1})
    assert "logit_bias" in info.value.message


def test_echo_leads_with_the_prompt_whole_and_streamed(client, model_id):
    plain = client.completions.create(model=model_id, prompt=PROMPT, temperature=0, max_tokens=6)
    echoed = client.completions.create(model=model_id, prompt=PROMPT, temperature=0, max_tokens=6, echo=True, n=2)
    for choice in echoed.choices:
        assert choice.text == PROMPT + plain.choices[0].text
    assert echoed.usage.completion_tokens == 2 * plain.usage.completion_tokens  # the prompt is not generated
    streamed = "".join(chunk.choices[0].text for chunk in client.completions.create(
        model=model_id, prompt=PROMPT, temperature=0, max_tokens=6, echo=True, stream=True) if chunk.choices)
    assert streamed == PROMPT + plain.choices[0].text
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model=model_id, prompt=PROMPT, max_tokens=2, echo=True, logprobs=1)
    assert info.value.param == "echo"


CODE_PROMPT = """def clamp(value, low, high):
    if value < low:
        return low
    if value > high:
        return high
    return value

# The same function again, unchanged:
def clamp(value, low, high):
"""


def drafted_and_kept(metrics: dict[str, float]) -> tuple[float, float]:
    drafted = sum(v for k, v in metrics.items() if k.startswith("mnemo_spec_draft_tokens_total{"))
    kept = sum(v for k, v in metrics.items() if k.startswith("mnemo_spec_accepted_tokens_total{"))
    return drafted, kept


def settled_metrics(url: str) -> dict[str, float]:
    """The metrics once the shared server is idle and its speculation counters stop moving (a
    request's last step may be counted just after its response is sent, and an earlier test's
    abandoned stream may still be running)."""
    from helpers import read_metrics

    deadline = time.monotonic() + 30
    while True:
        first = read_metrics(url)
        time.sleep(0.2)
        second = read_metrics(url)
        idle = second["mnemo_running_sequences"] == 0 and second["mnemo_waiting_sequences"] == 0
        if (idle and drafted_and_kept(first) == drafted_and_kept(second)) or time.monotonic() > deadline:
            return second


def test_speculation_keeps_the_output_and_a_request_may_opt_out(server, client, model_id):
    before = settled_metrics(server.url)
    assert 'mnemo_spec_draft_tokens_total{drafter="prompt_lookup"}' in before
    assert 'mnemo_spec_accepted_tokens_total{drafter="tenant_history"}' in before
    fast = client.completions.create(model=model_id, prompt=CODE_PROMPT, temperature=0, max_tokens=40)
    middle = settled_metrics(server.url)
    drafted, kept = drafted_and_kept(middle)
    assert drafted > drafted_and_kept(before)[0], "a repeated function drafts from its own context"
    assert kept > drafted_and_kept(before)[1]
    passes = middle["mnemo_decode_passes_total"] - before["mnemo_decode_passes_total"]
    tokens = middle["mnemo_generation_tokens_total"] - before["mnemo_generation_tokens_total"]
    assert tokens / passes > 1.0, "kept drafts are tokens without a pass of their own"
    plain = client.completions.create(model=model_id, prompt=CODE_PROMPT, temperature=0, max_tokens=40,
                                      extra_body={"speculation": False})
    after = settled_metrics(server.url)
    assert drafted_and_kept(after) == (drafted, kept), "an opted-out request drafts nothing"
    assert plain.choices[0].text == fast.choices[0].text
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model=model_id, prompt=PROMPT, max_tokens=1, extra_body={"speculation": "yes"})
    assert "speculation" in info.value.message
