"""Continuous batching must not change results: a greedy request gives the same tokens alone as
among 32 concurrent ones (AsyncOpenAI); /metrics accounts for all of them."""

from __future__ import annotations

import asyncio

import openai

from helpers import read_metrics, wait_for

PROMPTS = [
    "Name three colours.",
    "What is two plus two?",
    "Write a haiku about the sea.",
    "Who wrote Hamlet?",
    "Describe a cat in one sentence.",
    "What is the boiling point of water in Celsius? Explain briefly why it matters for cooking pasta at altitude.",
]
N_CONCURRENT = 32
MAX_TOKENS = 8


async def run_all(base_url: str, model_id: str, jobs: list[tuple[str, str]], concurrent: bool):
    """jobs: (endpoint, prompt). Returns [(text, usage)] in job order."""
    async with openai.AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=300) as client:
        async def one(endpoint: str, prompt: str):
            if endpoint == "chat":
                r = await client.chat.completions.create(model=model_id, messages=[{"role": "user", "content": prompt}],
                                                         temperature=0, max_tokens=MAX_TOKENS)
                return r.choices[0].message.content, r.usage
            r = await client.completions.create(model=model_id, prompt=prompt, temperature=0, max_tokens=MAX_TOKENS)
            return r.choices[0].text, r.usage

        if concurrent:
            return await asyncio.gather(*(one(e, p) for e, p in jobs))
        return [await one(e, p) for e, p in jobs]


def test_concurrent_greedy_matches_alone_and_metrics_count_it(server, model_id):
    distinct = [(endpoint, p) for p in PROMPTS for endpoint in ("chat", "completions")]
    alone = dict(zip(distinct, (text for text, _ in asyncio.run(run_all(server.base_url, model_id, distinct, False)))))

    before = read_metrics(server.url)
    jobs = [distinct[i % len(distinct)] for i in range(N_CONCURRENT)]
    results = asyncio.run(run_all(server.base_url, model_id, jobs, True))
    after = read_metrics(server.url)

    mismatches = [(job, alone[job], text) for job, (text, _) in zip(jobs, results) if text != alone[job]]
    assert not mismatches, "outputs differ under concurrency:\n" + "\n".join(map(repr, mismatches))

    def delta(name):
        return after[name] - before[name]

    assert delta("mnemo_requests_total") == N_CONCURRENT
    assert delta("mnemo_requests_finished_total") == N_CONCURRENT
    assert delta("mnemo_prompt_tokens_total") == sum(u.prompt_tokens for _, u in results)
    assert delta("mnemo_generation_tokens_total") == sum(u.completion_tokens for _, u in results)
    assert delta("mnemo_time_to_first_token_seconds_count") == N_CONCURRENT
    assert delta("mnemo_time_to_first_token_seconds_sum") > 0
    assert after["mnemo_time_to_first_token_seconds_bucket{le=\"+Inf\"}"] == after["mnemo_time_to_first_token_seconds_count"]
    # Buckets are cumulative.
    buckets = [v for k, v in after.items() if k.startswith("mnemo_time_to_first_token_seconds_bucket")]
    assert buckets == sorted(buckets)
    # Requests were batched together: some forward pass held more than one sequence's tokens.
    assert delta("mnemo_steps_total") < sum(u.completion_tokens for _, u in results)
    # The gauges return to idle once the engine has retired the finished sequences.
    wait_for(lambda: (lambda m: m["mnemo_running_sequences"] == 0 and m["mnemo_waiting_sequences"] == 0)(
        read_metrics(server.url)), timeout=10, what="running/waiting gauges back to 0")


def test_32_streams_are_served_together(server, model_id):
    """Every stream of a burst of 32 gets its first token before any of them ends: the server
    admits them all at once (none waits for an HTTP thread or for another request to finish)."""
    n_tokens = 16

    async def burst():
        async with openai.AsyncOpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=300) as client:
            events: list[tuple[str, int]] = []  # ("first" | "end", request), in arrival order

            async def one(i: int):
                stream = await client.completions.create(model=model_id, prompt=PROMPTS[i % len(PROMPTS)], temperature=0,
                                                         max_tokens=n_tokens, stream=True, extra_body={"ignore_eos": True})
                got_first = False
                reason = None
                async for chunk in stream:
                    for choice in chunk.choices:
                        if choice.text and not got_first:
                            got_first = True
                            events.append(("first", i))
                        reason = choice.finish_reason or reason
                events.append(("end", i))
                return reason

            reasons = await asyncio.gather(*(one(i) for i in range(N_CONCURRENT)))
            return events, reasons

    events, reasons = asyncio.run(burst())
    assert reasons == ["length"] * N_CONCURRENT
    kinds = [kind for kind, _ in events]
    first_end = kinds.index("end")
    assert kinds.count("first") == N_CONCURRENT
    assert "first" not in kinds[first_end:], f"a stream started only after another ended: {events}"
