#!/usr/bin/env python3
"""Failover benchmark (docs/benchmarks.md, "Fault tolerance"; SPEC D7, after DejaVu).

A real etcd, INSTANCES `mnemo serve --cluster` instances on the default model and `mnemo route`
in front. Each scenario starts a fresh cluster and sends REQUESTS concurrent streamed requests
(ShareGPT first turns, forced to MAX_TOKENS output tokens, seeded sampling):

  free          no failure, no replicas                    (the reference latency per request)
  free+replica  no failure, --replicas 1                   (replication's overhead)
  fail+replica  --replicas 1, the busiest instance SIGKILLed halfway through its replies: they
                resume on the replica holder, which has their KV
  fail+resume   no replicas, the same failure: they resume elsewhere, recomputing prompt and
                generated tokens (one prefill)
  fail+retry    no failover (today's servers): the client's stream breaks and the client sends
                the request again from scratch

and, with one instance, the local disk replica (route --disk-replica):

  solo              no failure, one instance                (their reference)
  solo+disk         no failure, --disk-replica              (persisting's overhead)
  solo-fail+disk    --disk-replica, the instance SIGKILLed halfway and started again on its state
                    folder: the router waits for it and resumes there, the KV read from its disk
  solo-fail+resume  the same without --disk-replica: the restarted instance recomputes

Reported per repeat and as medians over repeats: throughput (output tokens/s over the makespan),
and for the failed instance's requests their latency relative to the same requests' latency in
`free` (DejaVu: 1.24x with its replication vs 1.91x recomputing from scratch).

  .venv/bin/python bench/failover_bench.py [--out bench/results/failover-DATE] [--repeats 3]

Not part of CI (minutes). Needs a release build and etcd (scripts/setup.sh).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import shlex
import signal
import socket
import statistics
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests

# Every figure is measured on Gemma 3 270M (`mnemo serve` defaults to the chat model).
GEMMA_MODEL = os.path.join(os.environ.get("MNEMO_CACHE") or os.path.expanduser("~/.cache/mnemo"), "models", "gemma-3-270m-q4_k_m.gguf")

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ["free", "free+replica", "fail+replica", "fail+resume", "fail+retry"]
SOLO_SCENARIOS = ["solo", "solo+disk", "solo-fail+disk", "solo-fail+resume"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except requests.RequestException:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"timed out waiting for {what}")


class Proc:
    def __init__(self, args: list[str], log: Path):
        self.log = open(log, "w")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.args = args

    def url_from_log(self, path: Path, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = path.read_text(errors="replace")
            for line in text.splitlines():
                if "http://" in line and ("serving" in line or "routing" in line or "listening" in line):
                    start = line.rindex("http://")
                    return line[start:].split()[0].rstrip("/")
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.args[:2]} exited: {text[-2000:]}")
            time.sleep(0.1)
        raise RuntimeError(f"no URL in {path}")

    def stop(self, sig=signal.SIGTERM):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.log.close()


def thread_cpu_seconds(pid: int) -> dict[str, float]:
    """CPU time (user + system) of each thread of `pid`, summed by thread name."""
    ticks = os.sysconf("SC_CLK_TCK")
    by_name: dict[str, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:  # the thread ended meanwhile
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        by_name[name] = by_name.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / ticks
    return by_name


def cpu_delta(before: list[dict[str, float]], after: list[dict[str, float]]) -> dict[str, float]:
    """Per thread name, the CPU seconds spent between the snapshots, over all instances."""
    total: dict[str, float] = {}
    for b, a in zip(before, after):
        for name, seconds in a.items():
            total[name] = total.get(name, 0.0) + seconds - b.get(name, 0.0)
    return total


def metric(url: str, name: str, default: float | None = None) -> float:
    """One unlabelled metric of `url`/metrics; `default` if it is absent (None: an error)."""
    for line in requests.get(url + "/metrics", timeout=5).text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    if default is None:
        raise RuntimeError(f"{url}/metrics has no {name}")
    return default


def engine_task_seconds(url: str) -> float:
    """The instance's engine-thread seconds spent on posted work (KV exports and imports)."""
    return metric(url, "mnemo_engine_task_seconds_total")


@contextlib.contextmanager
def etcd_server(out: Path):
    """A throwaway etcd on free loopback ports, logging to out/etcd.log; yields its client URL."""
    data_dir = tempfile.mkdtemp(prefix="mnemo-bench-etcd-")
    client, peer = free_port(), free_port()
    url = f"http://127.0.0.1:{client}"
    etcd = Proc(["etcd", "--name", "bench", "--data-dir", data_dir, "--listen-client-urls", url, "--advertise-client-urls",
                 url, "--listen-peer-urls", f"http://127.0.0.1:{peer}", "--initial-advertise-peer-urls",
                 f"http://127.0.0.1:{peer}", "--initial-cluster", f"bench=http://127.0.0.1:{peer}"], out / "etcd.log")
    try:
        wait(lambda: requests.get(url + "/health", timeout=1).json().get("health") == "true", 30, "etcd")
        yield url
    finally:
        etcd.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


def write_results(out: Path, args, results: list[dict], table: str) -> None:
    """results.json (the arguments and every scenario's figures) and table.md; prints the table."""
    (out / "results.json").write_text(json.dumps({"args": vars(args), "results": results}, indent=1))
    (out / "table.md").write_text(table)
    print(table)


def first_turns(path: Path, count: int, min_chars: int, max_chars: int, seed: int) -> list[str]:
    turns = []
    with open(path) as f:
        for line in f:
            conv = json.loads(line)["conversations"]
            if conv and conv[0]["from"] == "human" and min_chars <= len(conv[0]["value"]) <= max_chars:
                turns.append(conv[0]["value"])
    random.Random(seed).shuffle(turns)
    return turns[:count]


class Stream:
    def __init__(self, url: str, body: dict, retry_from_scratch: bool):
        self.url, self.body, self.retry = url, body, retry_from_scratch
        self.instance = ""
        self.chunks = 0
        self.tokens = 0
        self.started_at = self.ended_at = 0.0
        self.error = ""
        self.retried = False
        self.resumed = False
        self.cached: dict = {}
        self.started = threading.Event()

    def once(self) -> bool:
        """One attempt; False if the stream broke before its end."""
        with requests.post(self.url + "/v1/chat/completions", json=self.body, stream=True, timeout=600) as r:
            if r.status_code != 200:
                raise RuntimeError(f"HTTP {r.status_code}: {r.text[:300]}")
            if not self.instance:
                self.instance = r.headers.get("X-Mnemo-Instance", "")
            self.started.set()
            buffer = b""
            try:
                for piece in r.iter_content(chunk_size=None):
                    buffer += piece
                    while b"\n\n" in buffer:
                        event, buffer = buffer.split(b"\n\n", 1)
                        data = event[len(b"data: "):]
                        if data == b"[DONE]":
                            return True
                        payload = json.loads(data)
                        if payload.get("usage"):
                            self.tokens = payload["usage"]["completion_tokens"]
                            details = payload["usage"].get("prompt_tokens_details", {})
                            self.resumed = "resumed_tokens" in details
                            self.cached = {k: details.get(k, 0) for k in ("cached_tokens", "resumed_cached_tokens",
                                                                         "resumed_tokens", "cached_tokens_disk")}
                        for choice in payload.get("choices", []):
                            if choice.get("delta", {}).get("content"):
                                self.chunks += 1
            except (requests.RequestException, ValueError):
                return False
        return False

    def run(self) -> "Stream":
        self.started_at = time.monotonic()
        try:
            ok = self.once()
            if not ok and self.retry:
                self.retried = True
                self.chunks = 0
                ok = self.once()
            if not ok:
                self.error = "stream broke"
        except Exception as e:  # noqa: BLE001  (reported)
            self.error = repr(e)
            self.started.set()
        self.ended_at = time.monotonic()
        return self


def run_scenario(args, scenario: str, bodies: list[dict], etcd_url: str, workdir: Path) -> dict:
    name = f"fo{os.getpid()}{scenario.replace('+', '')}{int(time.time() * 1000) % 100000}"
    instances = []
    solo = scenario.startswith("solo")
    for i in range(1 if solo else args.instances):
        log = workdir / f"{scenario}-instance{i}.log"
        p = Proc([args.mnemo_bin, "serve", "--model", GEMMA_MODEL, "--host", "127.0.0.1", "--port", "0", "--state-dir",
                  tempfile.mkdtemp(prefix="mnemo-fobench-", dir=workdir), "--cluster", etcd_url, "--cluster-name", name,
                  "--threads", str(args.threads), "--kv-tokens", str(args.kv_tokens), "--model-name", "m",
                  *shlex.split(args.serve_args)], log)
        p.url = p.url_from_log(log)
        p.log_path = log
        instances.append(p)
    replicas = "1" if "replica" in scenario else "0"
    failover = "false" if scenario == "fail+retry" else "true"
    rlog = workdir / f"{scenario}-router.log"
    router = Proc([args.mnemo_bin, "route", "--cluster", etcd_url, "--cluster-name", name, "--port", "0", "--replicas", replicas,
                   "--failover", failover, "--disk-replica", "true" if scenario.endswith("+disk") else "false",
                   "--resume-wait", "120"], rlog)
    router.url = router.url_from_log(rlog)
    wait(lambda: requests.get(router.url + "/health", timeout=2).json().get("instances") == len(instances), 30,
         "instances in the router's view")
    for inst in instances:  # warm each instance (pages of the model, threads)
        requests.post(inst.url + "/v1/chat/completions", json={"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4},
                      timeout=120)

    cpu_before = [thread_cpu_seconds(inst.proc.pid) for inst in instances]
    tasks_before = [engine_task_seconds(inst.url) for inst in instances]
    streams = [Stream(router.url, b, retry_from_scratch=scenario == "fail+retry") for b in bodies]
    killed = ""
    with ThreadPoolExecutor(len(streams)) as pool:
        futures = [pool.submit(s.run) for s in streams]
        if "fail" in scenario:
            for s in streams:
                s.started.wait(300)
            counts: dict[str, int] = {}
            for s in streams:
                counts[s.instance] = counts.get(s.instance, 0) + 1
            killed = max(counts, key=counts.get)
            victims = [s for s in streams if s.instance == killed]
            wait(lambda: all(s.chunks >= args.max_tokens // 2 or s.error for s in victims), 600, "halfway")
            for i, inst in enumerate(instances):
                if killed in inst.log_path.read_text(errors="replace"):
                    inst.proc.send_signal(signal.SIGKILL)
                    if solo:  # started again on the same state folder, as a supervisor would
                        inst.proc.wait()
                        log = workdir / f"{scenario}-instance{i}-restarted.log"
                        restarted = Proc(inst.args, log)
                        restarted.url = restarted.url_from_log(log)
                        restarted.log_path = log
                        instances.append(restarted)
        for f in futures:
            f.result()
    # A killed instance's threads are gone: only failure-free scenarios get CPU figures. The
    # pause lets work that follows the streams' ends (last increments, disk writes) be counted.
    time.sleep(1.0)
    cpu = cpu_delta(cpu_before, [thread_cpu_seconds(inst.proc.pid) for inst in instances]) if not killed else {}
    tasks = sum(engine_task_seconds(inst.url) for inst in instances) - sum(tasks_before) if not killed else 0.0
    metrics = requests.get(router.url + "/metrics", timeout=5).text
    cached = [s.cached for s in streams if s.instance == killed]
    router.stop()
    for inst in instances:
        inst.stop()
    errors = [s.error for s in streams if s.error]
    if errors:
        raise RuntimeError(f"{scenario}: {errors[:3]}")
    start = min(s.started_at for s in streams)
    end = max(s.ended_at for s in streams)
    return {
        "scenario": scenario,
        "killed": killed,
        "latency": [s.ended_at - s.started_at for s in streams],
        "affected": [i for i, s in enumerate(streams) if s.instance == killed],
        "output_tokens": sum(args.max_tokens for _ in streams),
        "throughput": len(streams) * args.max_tokens / (end - start),
        "cpu_seconds": cpu,
        "engine_task_seconds": tasks,
        # Of the affected requests, as their resumed part reported it: KV reused of the prompt
        # and of the tokens generated before the failure.
        "resumed_cached": cached,
        "router_metrics": {line.split()[0]: float(line.split()[1]) for line in metrics.splitlines()
                           if line.startswith("mnemo_router_resumed") or line.startswith("mnemo_router_failed")},
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mnemo-bin", default=str(ROOT / "build/release/bin/mnemo"))
    ap.add_argument("--out", default=str(ROOT / f"bench/results/failover-{time.strftime('%Y%m%d-%H%M%S')}"))
    ap.add_argument("--data", default=str(ROOT / "data/sharegpt_en.jsonl"))
    ap.add_argument("--instances", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1, help="per instance")
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--min-chars", type=int, default=1200, help="of the first turns used as prompts")
    ap.add_argument("--max-chars", type=int, default=2400)
    ap.add_argument("--kv-tokens", type=int, default=16384)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    ap.add_argument("--serve-args", default="", help="more arguments for every `mnemo serve`, e.g. '--disk-cache-bytes 0'")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    prompts = first_turns(Path(args.data), args.requests, args.min_chars, args.max_chars, args.seed)
    bodies = [{"model": "m", "messages": [{"role": "user", "content": p}], "max_tokens": args.max_tokens, "ignore_eos": True,
               "temperature": 0.8, "seed": 1000 + i, "stream": True, "stream_options": {"include_usage": True}}
              for i, p in enumerate(prompts)]
    results = []
    with etcd_server(out) as etcd_url:
        for repeat in range(args.repeats):
            for scenario in args.scenarios.split(","):
                r = run_scenario(args, scenario, bodies, etcd_url, out)
                r["repeat"] = repeat
                results.append(r)
                print(f"repeat {repeat} {scenario:13s} throughput {r['throughput']:.2f} tok/s, "
                      f"p50 latency {statistics.median(r['latency']):.2f} s, affected {len(r['affected'])} "
                      f"{r['router_metrics']}", flush=True)
    write_results(out, args, results, report(results))
    return 0


def report(results: list[dict]) -> str:
    by = {(r["repeat"], r["scenario"]): r for r in results}
    repeats = sorted({r["repeat"] for r in results})
    lines = ["| scenario | throughput vs free | mean latency vs free | instances' CPU vs free | "
             "affected requests' latency vs free (median over them) |",
             "|---|---|---|---|---|"]
    for scenario in SCENARIOS + SOLO_SCENARIOS:
        tput, mean_latency, cpu, slow = [], [], [], []
        reference = "solo" if scenario.startswith("solo") else "free"
        for rep in repeats:
            if (rep, scenario) not in by or (rep, reference) not in by:
                continue
            r, ref = by[(rep, scenario)], by[(rep, reference)]
            tput.append(r["throughput"] / ref["throughput"])
            # Unlike throughput over the makespan, not set by the one instance that ends last.
            mean_latency.append(statistics.mean(r["latency"]) / statistics.mean(ref["latency"]))
            if r.get("cpu_seconds") and ref.get("cpu_seconds"):
                cpu.append(sum(r["cpu_seconds"].values()) / sum(ref["cpu_seconds"].values()))
            if r["affected"]:
                slow.append(statistics.median(r["latency"][i] / ref["latency"][i] for i in r["affected"]))
        if not tput:
            continue
        each = lambda xs: ", ".join(f"{x:.2f}" for x in xs)  # noqa: E731
        lines.append(f"| {scenario} | {statistics.median(tput):.3f}x ({each(tput)}) | "
                     f"{statistics.median(mean_latency):.3f}x ({each(mean_latency)}) | "
                     + (f"{statistics.median(cpu):.3f}x ({each(cpu)}) | " if cpu else "- | ")
                     + (f"{statistics.median(slow):.2f}x ({each(slow)})" if slow else "-") + " |")
    # What the resumed requests found of their generated tokens' KV where they resumed.
    found = []
    for scenario in SCENARIOS + SOLO_SCENARIOS:
        shares = [c["resumed_cached_tokens"] / c["resumed_tokens"] for r in results if r["scenario"] == scenario
                  for c in r.get("resumed_cached", []) if c.get("resumed_tokens")]
        if shares:
            found.append(f"| {scenario} | {statistics.median(shares):.2f} ({len(shares)} requests) |")
    if found:
        lines += ["", "| scenario | resumed requests: share of their generated tokens whose KV was found (median) |",
                  "|---|---|"] + found
    lines += ["", "(solo rows are relative to solo, the others to free.)"]
    # Where the CPU went, by thread, at the median over the repeats (failure-free scenarios).
    names = sorted({n for r in results for n in r.get("cpu_seconds", {})})
    cpu_scenarios = [s for s in SCENARIOS + SOLO_SCENARIOS if any(r.get("cpu_seconds") for r in results if r["scenario"] == s)]
    if names and cpu_scenarios:
        lines += ["", "| thread (CPU s, median) | " + " | ".join(cpu_scenarios) + " |",
                  "|---|" + "---|" * len(cpu_scenarios)]
        for n in names:
            cells = [statistics.median(r["cpu_seconds"].get(n, 0.0) for r in results if r["scenario"] == s and r.get("cpu_seconds"))
                     for s in cpu_scenarios]
            lines.append(f"| {n} | " + " | ".join(f"{c:.2f}" for c in cells) + " |")
        cells = [statistics.median(r.get("engine_task_seconds", 0.0) for r in results if r["scenario"] == s and r.get("cpu_seconds"))
                 for s in cpu_scenarios]
        lines.append("| of mnemo-engine: posted KV work (exports, imports) | " + " | ".join(f"{c:.3f}" for c in cells) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
