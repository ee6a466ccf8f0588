"""Starts scripted fake providers and a gateway in front of them, as real processes.

Two OpenAI-shaped fakes back the `smart` route (the first also speaks the Responses API;
`smart-claude` has it before the Anthropic-shaped fake); one fake per provider kind (openai,
anthropic, gemini, azure, Vertex with a Gemini model and with a Claude one, behind Google
auth with the test service account, and Bedrock, behind AWS's SigV4 with a test profile's
keys) backs a one-step route `via-KIND`; `limited` is a deployment of
its own on the anthropic fake, for rate limits that must not bench `via-anthropic`; `cross`
is an Anthropic primary before an OpenAI secondary; `degraded` (a degraded tier) and `passthrough` (the
Responses API on primary) have deployments of their own. Each test scripts the fakes over HTTP
(PUT /_fake/script) before it sends its requests.
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


FIXTURES = ROOT / "tests" / "fixtures"


class Fake:
    def __init__(self, name, *args):
        self.port = free_port()
        self.process = start(
            ["fake-upstream", "--listen", f"127.0.0.1:{self.port}", "--name", name, *args],
            "fake upstream",
            "stdout",
        )
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        # The base URL of the non-OpenAI kinds is the host; the fake serves every shape.
        self.root_url = f"http://127.0.0.1:{self.port}"

    def script(self, *behaviors):
        body = json.dumps({"behaviors": list(behaviors)}).encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/_fake/script", data=body, method="PUT"
        )
        urllib.request.urlopen(request, timeout=5).read()

    def requests(self):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/_fake/requests", timeout=5) as r:
            return json.load(r)

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
# It speaks the Responses API too (as OpenAI's own base URL would by default).
responses = true

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

[[providers]]
name = "openai"
kind = "openai"
base_url = "{openai}"
key_required = false

[[providers]]
name = "anthropic"
kind = "anthropic"
base_url = "{anthropic}"
key_required = false
default_max_tokens = 512

[[providers]]
name = "gemini"
kind = "gemini"
base_url = "{gemini}"
key_required = false

[[providers]]
name = "azure"
kind = "azure"
base_url = "{azure}"
key_required = false
api_version = "2024-10-21"

[[routes]]
name = "via-openai"
steps = [{{ provider = "openai", model = "gpt-4o" }}]

[[routes]]
name = "via-anthropic"
steps = [{{ provider = "anthropic", model = "claude-sonnet-4-5" }}]

[[routes]]
name = "via-gemini"
steps = [{{ provider = "gemini", model = "gemini-2.5-flash" }}]

[[routes]]
name = "via-azure"
steps = [{{ provider = "azure", model = "gpt-4o-deployment" }}]

[[providers]]
name = "vertex"
kind = "vertex"
base_url = "{vertex}"
project = "switchyard-test"
location = "us-east5"
credentials_file = "{vertex_key}"

[[providers]]
name = "vertex-claude"
kind = "vertex"
base_url = "{vertex_claude}"
project = "switchyard-test"
location = "global"
credentials_file = "{vertex_claude_key}"

[[routes]]
name = "via-vertex"
steps = [{{ provider = "vertex", model = "gemini-2.5-flash" }}]

[[routes]]
name = "via-vertex-claude"
steps = [{{ provider = "vertex-claude", model = "claude-sonnet-4@20250514" }}]

# Bedrock, SigV4-signed with the test profile's keys, which the fake verifies.
[[providers]]
name = "bedrock"
kind = "bedrock"
base_url = "{bedrock}"
region = "us-east-1"
credentials_file = "{aws_credentials}"
profile = "switchyard-test"

[[routes]]
name = "via-bedrock"
steps = [{{ provider = "bedrock", model = "us.anthropic.claude-3-5-haiku-20241022-v1:0" }}]

[[providers]]
name = "limited"
kind = "anthropic"
base_url = "{anthropic}"
key_required = false

[[routes]]
name = "limited"
steps = [{{ provider = "limited", model = "claude-sonnet-4-5" }}]

# The Responses API passed through to primary, with an Anthropic fallback.
[[routes]]
name = "smart-claude"
steps = [
  {{ provider = "primary", model = "big" }},
  {{ provider = "anthropic", model = "claude-sonnet-4-5" }},
]

# A degraded tier, and the Responses API passed through, each on a deployment of its own, so
# the tests that fail them bench nothing another test needs (nor the other way round).
[[routes]]
name = "degraded"
steps = [{{ provider = "openai", model = "gpt-degraded" }}]
degraded = {{ content = "The assistant is temporarily unavailable." }}

[[routes]]
name = "passthrough"
steps = [{{ provider = "primary", model = "passthrough" }}]

# The Vercel AI SDK's tests on primary's Responses API: a deployment of their own, so no
# earlier test's failures on `smart` have benched it.
[[routes]]
name = "vercel"
steps = [{{ provider = "primary", model = "vercel" }}]

# The response cache, on a deployment of its own: its answers are kept for an hour.
[[routes]]
name = "cached"
steps = [{{ provider = "openai", model = "gpt-cached" }}]
cache = {{ ttl = "1h", scope = "shared" }}

[[routes]]
name = "cross"
steps = [
  {{ provider = "anthropic", model = "claude-sonnet-4-5" }},
  {{ provider = "secondary", model = "small" }},
]
"""

KINDS = ("openai", "anthropic", "gemini", "azure", "vertex", "vertex-claude", "bedrock")
VERTEX = ("vertex", "vertex-claude")
# The Bedrock fake's account: it verifies every request's SigV4 signature with these.
AWS_KEYS = ("AKIDSWITCHYARDSDK001", "sdkSecretAccessKey/EXAMPLE+KEY", "sdk-session-token")


def fake_args(kind):
    """The fake for `kind`'s auth: Google's for Vertex, AWS's for Bedrock."""
    if kind in VERTEX:
        return ["--google-public-key", str(FIXTURES / "vertex-public-key.b64")]
    if kind == "bedrock":
        return ["--aws-credentials", ":".join(AWS_KEYS)]
    return []


def aws_credentials_file():
    """A shared credentials file whose `switchyard-test` profile holds the fake's keys."""
    key_id, secret, token = AWS_KEYS
    file = tempfile.NamedTemporaryFile("w", suffix=".ini", delete=False)
    file.write(
        "[switchyard-test]\n"
        f"aws_access_key_id = {key_id}\n"
        f"aws_secret_access_key = {secret}\n"
        f"aws_session_token = {token}\n"
    )
    file.close()
    return file.name


def vertex_key(fake):
    """The test service account's key file, its token_uri at `fake`."""
    key = json.loads((FIXTURES / "vertex-service-account.json").read_text())
    key["token_uri"] = f"{fake.root_url}/token"
    file = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
    json.dump(key, file)
    file.close()
    return file.name


@pytest.fixture(scope="session")
def stack():
    primary, secondary = Fake("primary"), Fake("secondary")
    kinds = {kind: Fake(kind, *fake_args(kind)) for kind in KINDS}
    keys = {kind: vertex_key(kinds[kind]) for kind in VERTEX}
    keys["bedrock"] = aws_credentials_file()
    port = free_port()
    config = tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False)
    config.write(
        CONFIG.format(
            port=port,
            primary=primary.base_url,
            secondary=secondary.base_url,
            openai=kinds["openai"].base_url,
            anthropic=kinds["anthropic"].root_url,
            gemini=kinds["gemini"].root_url,
            azure=kinds["azure"].root_url,
            vertex=kinds["vertex"].root_url,
            vertex_key=keys["vertex"],
            vertex_claude=kinds["vertex-claude"].root_url,
            vertex_claude_key=keys["vertex-claude"],
            bedrock=kinds["bedrock"].root_url,
            aws_credentials=keys["bedrock"],
        )
    )
    config.close()
    gateway = start(["serve", "--config", config.name], "switchyard listening", "stderr")
    yield {
        "url": f"http://127.0.0.1:{port}/v1",
        "root": f"http://127.0.0.1:{port}",
        "primary": primary,
        "secondary": secondary,
        "kinds": kinds,
    }
    fakes = [primary, secondary, *kinds.values()]
    for process in (gateway, *(fake.process for fake in fakes)):
        process.terminate()
        process.wait(timeout=10)
    os.unlink(config.name)
    for key in keys.values():
        os.unlink(key)


@pytest.fixture
def client(stack):
    from openai import OpenAI

    stack["primary"].script({})
    stack["secondary"].script({})
    # SDKs always send a key; with [auth] required = false the gateway ignores it.
    return OpenAI(base_url=stack["url"], api_key="sk-anything", timeout=15, max_retries=0)


@pytest.fixture
def fakes(stack):
    """Every fake, reset to healthy answers."""
    for fake in (stack["primary"], stack["secondary"], *stack["kinds"].values()):
        fake.script({})
    return stack


@pytest.fixture
def anthropic_client(fakes):
    from anthropic import Anthropic

    # The SDK sends its key as x-api-key; with [auth] required = false the gateway ignores it.
    return Anthropic(base_url=fakes["root"], api_key="sk-ant-anything", timeout=15, max_retries=0)


@pytest.fixture
def openai_client(fakes):
    from openai import OpenAI

    return OpenAI(base_url=fakes["url"], api_key="sk-anything", timeout=15, max_retries=0)
