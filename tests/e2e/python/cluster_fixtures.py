"""A real etcd on loopback for the cluster tests (test_cluster.py, test_tiny_cluster.py, test_failover.py),
and what they share: finding an instance by the id it printed, its KV transport, the router's
followed caches."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import tempfile

import pytest
import requests

from helpers import read_metrics, reference_model_path, wait_for  # noqa: F401  (re-exported)

ETCD = "/usr/bin/etcd"


def instance_by_id(cluster, instance_id: str):
    """The started instance (cluster["instances"]) that printed `instance_id` when it joined."""
    for server in cluster["instances"]:
        if any(instance_id in line for line in server.stdout_lines):
            return server
    pytest.fail(f"no instance printed id {instance_id}")


def transport_of(server) -> str:
    """The KV transport endpoint an instance printed when it joined."""
    for line in server.stdout_lines:
        m = re.search(r"\(KV transport ([^)]+)\)", line)
        if m:
            return m.group(1)
    pytest.fail("the instance printed no KV transport endpoint")


def followed(router_url: str) -> dict[str, float]:
    """Instance id -> chunks its cache holds, as a tokenizing router follows it."""
    prefix = "mnemo_router_followed_cache_chunks{"
    return {re.search(r'instance="([^"]+)"', k).group(1): v
            for k, v in read_metrics(router_url).items() if k.startswith(prefix)}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def etcd():
    if not os.access(ETCD, os.X_OK):
        pytest.fail(f"{ETCD} is missing: run scripts/setup.sh (Debian package etcd-server)")
    data = tempfile.mkdtemp(prefix="mnemo-etcd-")
    client, peer = free_port(), free_port()
    url = f"http://127.0.0.1:{client}"
    proc = subprocess.Popen(
        [ETCD, "--name", "test", "--data-dir", data, "--listen-client-urls", url, "--advertise-client-urls", url,
         "--listen-peer-urls", f"http://127.0.0.1:{peer}", "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
         "--initial-cluster", f"test=http://127.0.0.1:{peer}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)

    def healthy():
        try:
            return requests.get(url + "/health", timeout=1).json().get("health") == "true"
        except requests.RequestException:
            return False

    wait_for(healthy, 30, 0.1, "etcd to answer /health")
    yield url
    proc.kill()
    proc.wait(timeout=10)
    shutil.rmtree(data, ignore_errors=True)


@pytest.fixture(scope="module")
def secure_etcd():
    """etcd over TLS (a certificate from a CA of the test's own) with its auth enabled: a user
    root whose password is in a file. Yields url, ca (PEM), user, password_file."""
    folder = tempfile.mkdtemp(prefix="mnemo-etcd-tls-")
    path = lambda name: os.path.join(folder, name)  # noqa: E731
    def openssl(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True)
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", path("ca.key"), "-out", path("ca.pem"), "-days", "1",
            "-subj", "/CN=mnemo-e2e-ca")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", path("server.key"), "-out", path("server.csr"),
            "-subj", "/CN=127.0.0.1")
    with open(path("ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\n")
    openssl("x509", "-req", "-in", path("server.csr"), "-CA", path("ca.pem"), "-CAkey", path("ca.key"), "-CAcreateserial",
            "-out", path("server.pem"), "-days", "1", "-extfile", path("ext"))
    client, peer = free_port(), free_port()
    url = f"https://127.0.0.1:{client}"
    proc = subprocess.Popen(
        [ETCD, "--name", "tls", "--data-dir", path("data"), "--listen-client-urls", url, "--advertise-client-urls", url,
         "--listen-peer-urls", f"http://127.0.0.1:{peer}", "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
         "--initial-cluster", f"tls=http://127.0.0.1:{peer}", "--cert-file", path("server.pem"), "--key-file", path("server.key")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)

    def healthy():
        try:
            return requests.get(url + "/health", timeout=1, verify=path("ca.pem")).json().get("health") == "true"
        except requests.RequestException:
            return False

    wait_for(healthy, 30, 0.1, "etcd (TLS) to answer /health")
    password = "e2e-etcd-password"
    with open(path("password"), "w") as f:
        f.write(password + "\n")
    ctl = [shutil.which("etcdctl") or "/usr/bin/etcdctl", "--endpoints", url, "--cacert", path("ca.pem")]
    env = {**os.environ, "ETCDCTL_API": "3"}
    subprocess.run([*ctl, "user", "add", f"root:{password}", "--interactive=false"], check=True, capture_output=True, env=env)
    subprocess.run([*ctl, "auth", "enable"], check=True, capture_output=True, env=env)
    yield {"url": url, "ca": path("ca.pem"), "user": "root", "password_file": path("password")}
    proc.kill()
    proc.wait(timeout=10)
    shutil.rmtree(folder, ignore_errors=True)
