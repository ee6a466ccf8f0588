"""`/metrics` read by the reference OpenMetrics parser, Python's prometheus_client.

The Rust tests read the exposition with a strict reader of our own (tests/common/openmetrics.rs);
this holds the same exposition to an independent implementation. The gateway runs with a
provider, a route and models whose configured names carry quotes, braces, backslashes, `#`,
line breaks and non-ASCII text, and clients send hostile names of their own: every series must
parse, carry exactly the configured names, and nothing may forge a family or end the scrape.
"""

import json
import os
import tempfile
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from conftest import Fake, free_port, start

TOKEN = "sdk-metrics-token"
# Configured names, as tests/gateway/metrics.rs's hostile client name: each tries to close its
# label, write a sample or an exemplar of its own, or end the exposition early.
PROVIDER = 'up"} 1 # {a="b"} 2 \\'
ROUTE = 'r"} 1 forged_total{route="r"} 1e9 # EOF \\"é'
MODEL = 'm\\n"} 2 # {trace_id="x"} 1 🚀'
# A model whose name holds line breaks: no client can name it (the gateway refuses a model
# with a line break), but route `spare` leads to it.
SPARE_MODEL = 'spare\nforged_total{route="r"} 1e9\n# EOF\n'
# What clients send: a direct name the config does not define, and one with line breaks.
UNKNOWN = f'{PROVIDER}/x"}} 1 forged_total{{route="r"}} 1e9 # EOF \\"'
BROKEN = f'{PROVIDER}/x"}} 1\nforged_total{{route="r"}} 1e9\n# EOF\n\\"'


def toml(value):
    """A TOML basic string: JSON's escapes are TOML's, with non-ASCII left as it is."""
    return json.dumps(value, ensure_ascii=False)


def config(port, upstream):
    return f"""
[server]
listen = "127.0.0.1:{port}"

[admin]
metrics_token = "{TOKEN}"

[auth]
required = false
direct_models = true

[store]
url = "sqlite::memory:"

[[providers]]
name = {toml(PROVIDER)}
kind = "openai"
base_url = "{upstream}"
key_required = false

[[routes]]
name = {toml(ROUTE)}
steps = [{{ provider = {toml(PROVIDER)}, model = {toml(MODEL)} }}]

[[routes]]
name = "spare"
steps = [{{ provider = {toml(PROVIDER)}, model = {toml(SPARE_MODEL)} }}]
"""


@pytest.fixture(scope="module")
def gateway():
    port = free_port()
    fake = Fake("hostile-upstream")
    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as file:
        file.write(config(port, fake.base_url))
    running = [fake.process]
    try:
        running.append(start(["serve", "--config", file.name], "switchyard listening", "stderr"))
        yield f"http://127.0.0.1:{port}"
    finally:
        for process in running:
            process.terminate()
            process.wait(timeout=10)
        os.unlink(file.name)


def chat(gateway, model):
    """The status of a chat completion asking for `model`."""
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}]})
    request = urllib.request.Request(
        f"{gateway}/v1/chat/completions",
        data=body.encode(),
        headers={"content-type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=15) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def scrape(gateway):
    """`/metrics` as a scraper asks for it, and every family the reference parser reads."""
    request = urllib.request.Request(
        f"{gateway}/metrics",
        headers={
            "authorization": f"Bearer {TOKEN}",
            "accept": "application/openmetrics-text; version=1.0.0; charset=utf-8",
        },
    )
    with urllib.request.urlopen(request, timeout=15) as response:
        assert response.headers["content-type"].startswith("application/openmetrics-text")
        text = response.read().decode("utf-8")
    # The parser is a generator that checks as it goes (`# EOF` last of all): read it all.
    return text, list(text_string_to_metric_families(text))


def label_values(families, label, family=None):
    """Every value `label` takes, in `family` or in any."""
    return {
        sample.labels[label]
        for f in families
        if family in (None, f.name)
        for sample in f.samples
        if label in sample.labels
    }


def test_hostile_names_parse_back_exactly_and_forge_nothing(gateway):
    direct = f"{PROVIDER}/{MODEL}"
    assert chat(gateway, ROUTE) == 200
    assert chat(gateway, "spare") == 200
    assert chat(gateway, direct) == 200
    assert chat(gateway, UNKNOWN) == 200
    assert chat(gateway, BROKEN) == 400

    # The request log and its metrics are written after the answer: wait for all five.
    routes = {ROUTE, "spare", direct, "other", "-"}
    deadline = time.monotonic() + 15
    while True:
        text, families = scrape(gateway)
        if label_values(families, "route", "switchyard_requests") == routes:
            break
        assert time.monotonic() < deadline, text
        time.sleep(0.1)

    names = {f.name for f in families}
    assert all(name.startswith("switchyard_") for name in names), names
    assert {"switchyard_requests", "switchyard_attempts", "switchyard_breaker_state"} <= names
    assert label_values(families, "route") == routes, text
    assert label_values(families, "provider") == {PROVIDER}, text
    assert label_values(families, "model") == {MODEL, SPARE_MODEL, "other"}, text
    # The breaker states, set at the scrape itself, carry the line-broken name exactly too.
    spare = [
        s
        for f in families
        if f.name == "switchyard_breaker_state"
        for s in f.samples
        if s.labels["model"] == SPARE_MODEL
    ]
    assert [s.labels for s in spare] == [{"provider": PROVIDER, "model": SPARE_MODEL}]
    # The one `# EOF` is the scrape's last line, however many the names held.
    assert text.count("\n# EOF") == 1 and text.endswith("\n# EOF\n"), text[-200:]
