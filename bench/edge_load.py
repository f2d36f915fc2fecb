#!/usr/bin/env python3
"""The edge under load (issue 22), not part of CI: a `mnemo serve` on the default model, then

  1. streams: N concurrent streaming completions held open at once on loopback (default 2,000,
     --max-in-flight N), each answered to its [DONE]; errors counted;
  2. soak: mixed traffic for D seconds (default 600) from C clients: whole and streamed chat,
     Responses turns that continue each other, streams dropped halfway, malformed bodies, /health;
     the server's RSS sampled every 10 s. Flat means the RSS at the end is within 10% of the RSS
     at minute 2. The KV tiers are mapped up front and touched as they fill (the default 64 Ki-token
     pool alone is ~1.2 GB on Gemma 3 270M), so the soak runs with small tiers (--kv-tokens and
     host tiers of 8,192 tokens) that fill within the first two minutes: what grows after that
     is the edge's.

With --through-router the streams go through `mnemo route` (a real etcd from Debian's
etcd-server, the instance registered with --cluster): the router relays every stream from its
upstream I/O threads, and its thread count is sampled while they are all open (it must not grow
with the streams).

Raw asyncio sockets (HTTP/1.1 by hand), so thousands of clients cost this process little.

  .venv/bin/python bench/edge_load.py [--streams 2000] [--soak-seconds 600] [--clients 32] [--through-router]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import resource
import subprocess
import sys
import tempfile
import time

# Every figure is measured on Gemma 3 270M (`mnemo serve` defaults to the chat model).
GEMMA_MODEL = os.path.join(os.environ.get("MNEMO_CACHE") or os.path.expanduser("~/.cache/mnemo"), "models", "gemma-3-270m-q4_k_m.gguf")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def raise_nofile(n: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, max(soft, n))
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_etcd() -> tuple[subprocess.Popen, str]:
    data = tempfile.mkdtemp(prefix="mnemo-edge-etcd-")
    client, peer = free_port(), free_port()
    url = f"http://127.0.0.1:{client}"
    proc = subprocess.Popen(
        ["/usr/bin/etcd", "--name", "bench", "--data-dir", data, "--listen-client-urls", url, "--advertise-client-urls", url,
         "--listen-peer-urls", f"http://127.0.0.1:{peer}", "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
         "--initial-cluster", f"bench=http://127.0.0.1:{peer}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(2)
    return proc, url


def start_router(binary: str, etcd: str, max_connections: int) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen([binary, "route", "--cluster", etcd, "--cluster-name", "edge", "--host", "127.0.0.1", "--port", "0",
                             "--max-connections", str(max_connections)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    for line in proc.stdout:
        match = re.search(r" at https?://127\.0\.0\.1:(\d+)/", line)
        if match:
            return proc, int(match.group(1))
    raise SystemExit("mnemo route did not start")


def threads_of(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    return 0


def start_server(binary: str, max_in_flight: int, kv_tokens: int, *extra: str) -> tuple[subprocess.Popen, int]:
    state = tempfile.mkdtemp(prefix="mnemo-edge-load-")
    proc = subprocess.Popen([binary, "serve", "--model", GEMMA_MODEL, "--host", "127.0.0.1", "--port", "0", "--state-dir", state, *extra,
                             "--max-in-flight", str(max_in_flight), "--max-connections", str(max_in_flight + 256),
                             "--kv-tokens", str(kv_tokens), "--host-swap-tokens", str(kv_tokens),
                             "--host-compact-tokens", str(kv_tokens), "--disk-cache-bytes", str(256 << 20),
                             "--access-log", "off"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    for line in proc.stdout:
        match = re.search(r"at https?://127\.0\.0\.1:(\d+)/", line)
        if match:
            return proc, int(match.group(1))
    raise SystemExit("mnemo serve did not start")


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


async def request(port: int, method: str, path: str, body: dict | bytes | None = None, drop_after: int = 0) -> tuple[int, bytes]:
    """One request on its own connection; the status and the body (chunked bodies left framed)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    payload = body if isinstance(body, bytes) else (json.dumps(body).encode() if body is not None else b"")
    writer.write(f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\n"
                 f"Content-Length: {len(payload)}\r\n\r\n".encode() + payload)
    await writer.drain()
    try:
        if drop_after:
            data = await reader.read(drop_after)
            return (int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/") else 0), data
        data = await reader.read()
        status = int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/") else 0
        return status, data.split(b"\r\n\r\n", 1)[-1]
    finally:
        writer.close()


async def held_streams(port: int, n: int, watch_pid: int = 0) -> dict:
    started = time.monotonic()
    body = {"prompt": "Count: 1, 2, 3,", "max_tokens": 4, "stream": True, "temperature": 0}
    most_threads = 0

    async def watch() -> None:  # the relaying process's threads while the streams are open
        nonlocal most_threads
        while True:
            most_threads = max(most_threads, threads_of(watch_pid))
            await asyncio.sleep(0.2)

    watcher = asyncio.create_task(watch()) if watch_pid else None
    results = await asyncio.gather(*(request(port, "POST", "/v1/completions", body) for _ in range(n)), return_exceptions=True)
    if watcher:
        watcher.cancel()
    errors = [r for r in results if isinstance(r, BaseException) or r[0] != 200 or b"data: [DONE]" not in r[1]]
    report = {"streams": n, "errors": len(errors), "seconds": round(time.monotonic() - started, 1),
              "first_error": repr(errors[0])[:200] if errors else None}
    if watch_pid:
        report["router_threads_at_most"] = most_threads
    return report


async def soak_client(port: int, until: float, counts: dict, rng: random.Random) -> None:
    previous = None
    while time.monotonic() < until:
        kind = rng.choice(["chat", "stream", "responses", "drop", "malformed", "health"])
        try:
            if kind == "chat":
                status, _ = await request(port, "POST", "/v1/chat/completions",
                                          {"messages": [{"role": "user", "content": f"Say {rng.randint(0, 999)}"}], "max_tokens": 8})
            elif kind == "stream":
                status, _ = await request(port, "POST", "/v1/completions", {"prompt": "Once", "max_tokens": 8, "stream": True})
            elif kind == "responses":
                turn = {"input": f"Tell me about {rng.randint(0, 99)}", "max_output_tokens": 8}
                if previous:
                    turn["previous_response_id"] = previous
                status, body = await request(port, "POST", "/v1/responses", turn)
                previous = json.loads(body)["id"] if status == 200 and rng.random() < 0.8 else None
            elif kind == "drop":
                status, _ = await request(port, "POST", "/v1/completions",
                                          {"prompt": "Once", "max_tokens": 200, "stream": True, "ignore_eos": True}, drop_after=512)
            elif kind == "malformed":
                status, _ = await request(port, "POST", "/v1/chat/completions", b'{"messages": [' + b"[" * 5000)
                status = 200 if status == 400 else status
            else:
                status, _ = await request(port, "GET", "/health")
        except (OSError, ValueError, json.JSONDecodeError) as e:
            counts["errors"] += 1
            counts.setdefault("first_error", repr(e)[:200])
            continue
        counts[kind] = counts.get(kind, 0) + 1
        if status != 200:
            counts["errors"] += 1
            counts.setdefault("first_error", f"{kind}: HTTP {status}")


async def soak(port: int, pid: int, seconds: float, clients: int) -> dict:
    until = time.monotonic() + seconds
    counts: dict = {"errors": 0}
    rng = random.Random(7)
    tasks = [asyncio.create_task(soak_client(port, until, counts, random.Random(rng.random()))) for _ in range(clients)]
    samples = []
    started = time.monotonic()
    while time.monotonic() < until:
        await asyncio.sleep(10)
        samples.append((round(time.monotonic() - started), round(rss_mib(pid), 1)))
    await asyncio.gather(*tasks)
    at_two = next((rss for t, rss in samples if t >= 120), samples[0][1] if samples else 0.0)
    end = samples[-1][1] if samples else 0.0
    return {"seconds": seconds, "clients": clients, "requests": {k: v for k, v in counts.items() if k not in ("errors", "first_error")},
            "errors": counts["errors"], "first_error": counts.get("first_error"), "rss_mib_at_2_min": at_two,
            "rss_mib_at_end": end, "rss_growth": round(end / at_two - 1, 3) if at_two else None, "rss_samples": samples}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mnemo", default=os.path.join(ROOT, "build/release/bin/mnemo"))
    parser.add_argument("--streams", type=int, default=2000)
    parser.add_argument("--soak-seconds", type=float, default=600)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--kv-tokens", type=int, default=8192, help="device pool and each host tier, in tokens")
    parser.add_argument("--through-router", action="store_true", help="the streams through `mnemo route` (no soak)")
    args = parser.parse_args()
    raise_nofile(args.streams * 2 + 1024)
    if args.through_router:
        return through_router(args)
    proc, port = start_server(args.mnemo, args.streams, args.kv_tokens)
    try:
        report = {"held_streams": asyncio.run(held_streams(port, args.streams)), "rss_mib_after_streams": rss_mib(proc.pid)}
        if args.soak_seconds > 0:
            report["soak"] = asyncio.run(soak(port, proc.pid, args.soak_seconds, args.clients))
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    print(json.dumps(report, indent=1))
    ok = report["held_streams"]["errors"] == 0
    if "soak" in report:
        ok = ok and report["soak"]["errors"] == 0 and (report["soak"]["rss_growth"] or 0) <= 0.10
    return 0 if ok else 1


def through_router(args: argparse.Namespace) -> int:
    etcd, etcd_url = start_etcd()
    processes = [etcd]
    try:
        server, _ = start_server(args.mnemo, args.streams, args.kv_tokens, "--cluster", etcd_url, "--cluster-name", "edge")
        processes.append(server)
        router, port = start_router(args.mnemo, etcd_url, args.streams + 256)
        processes.append(router)
        time.sleep(2)  # the router sees the instance's lease
        idle_threads = threads_of(router.pid)
        report = {"router_threads_idle": idle_threads,
                  "held_streams": asyncio.run(held_streams(port, args.streams, watch_pid=router.pid)),
                  "router_rss_mib_after_streams": rss_mib(router.pid)}
    finally:
        for proc in reversed(processes):
            proc.terminate()
            proc.wait(timeout=60)
    print(json.dumps(report, indent=1))
    return 0 if report["held_streams"]["errors"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
