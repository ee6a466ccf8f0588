"""Starts two scripted fake providers and a gateway in front of them, as real processes.

Each test scripts the fakes over HTTP (PUT /_fake/script) before it sends its requests.
"""

import json
import os
import pathlib
import queue
import socket
import subprocess
import tempfile
import threading
import urllib.request

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BIN = os.environ.get("SWITCHYARD_BIN", str(ROOT / "target" / "debug" / "switchyard"))
READY_SECONDS = 30


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(args, ready_text, stream_name):
    """Starts the binary and waits for its ready line (not for a while)."""
    process = subprocess.Popen(
        [BIN, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "SWITCHYARD_LOG": "info"},
    )
    lines = queue.Queue()
    stream = getattr(process, stream_name)

    def pump():
        for line in stream:
            lines.put(line)

    threading.Thread(target=pump, daemon=True).start()
    while True:
        try:
            line = lines.get(timeout=READY_SECONDS)
        except queue.Empty:
            process.kill()
            raise RuntimeError(f"{args[0]} did not become ready")
        if ready_text in line:
            return process


class Fake:
    def __init__(self, name):
        self.port = free_port()
        self.process = start(
            ["fake-upstream", "--listen", f"127.0.0.1:{self.port}", "--name", name],
            "fake upstream",
            "stdout",
        )
        self.base_url = f"http://127.0.0.1:{self.port}/v1"

    def script(self, *behaviors):
        body = json.dumps({"behaviors": list(behaviors)}).encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/_fake/script", data=body, method="PUT"
        )
        urllib.request.urlopen(request, timeout=5).read()

    def stats(self):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/_fake/stats", timeout=5) as r:
            return json.load(r)


CONFIG = """
[server]
listen = "127.0.0.1:{port}"

[auth]
required = false

[store]
url = "sqlite::memory:"

[retry]
backoff_base = "10ms"
backoff_max = "50ms"
attempt_timeout = "2s"
request_deadline = "10s"
stream_idle_timeout = "2s"

[[providers]]
name = "primary"
kind = "openai"
base_url = "{primary}"
key_required = false

[[providers]]
name = "secondary"
kind = "openai"
base_url = "{secondary}"
key_required = false

[[routes]]
name = "smart"
steps = [
  {{ provider = "primary", model = "big" }},
  {{ provider = "secondary", model = "small" }},
]
degraded = {{ content = "The assistant is temporarily unavailable." }}
"""


@pytest.fixture(scope="session")
def stack():
    primary, secondary = Fake("primary"), Fake("secondary")
    port = free_port()
    config = tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False)
    config.write(CONFIG.format(port=port, primary=primary.base_url, secondary=secondary.base_url))
    config.close()
    gateway = start(["serve", "--config", config.name], "switchyard listening", "stderr")
    yield {"url": f"http://127.0.0.1:{port}/v1", "primary": primary, "secondary": secondary}
    for process in (gateway, primary.process, secondary.process):
        process.terminate()
        process.wait(timeout=10)
    os.unlink(config.name)


@pytest.fixture
def client(stack):
    from openai import OpenAI

    stack["primary"].script({})
    stack["secondary"].script({})
    # SDKs always send a key; with [auth] required = false the gateway ignores it.
    return OpenAI(base_url=stack["url"], api_key="sk-anything", timeout=15, max_retries=0)
