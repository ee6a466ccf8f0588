"""The Vercel AI SDK's default `openai("...")` provider (the Responses API), in Node,
through the gateway. `scripts/test` installs it from the npm registry into tests/sdk/node."""

import json
import os
import pathlib
import shutil
import subprocess

import pytest

NODE_DIR = pathlib.Path(__file__).resolve().parent / "node"


def node_ready():
    return shutil.which("node") and (NODE_DIR / "node_modules" / "ai").is_dir()


if not node_ready():
    if os.environ.get("SWITCHYARD_REQUIRE_SERVICES") == "1":
        raise RuntimeError("node and tests/sdk/node/node_modules are required: run scripts/test")
    pytest.skip("SKIPPED: node or tests/sdk/node/node_modules missing (scripts/test installs them)", allow_module_level=True)


def run(fakes, scenario, model):
    out = subprocess.run(
        ["node", str(NODE_DIR / "responses.mjs"), fakes["url"], scenario, model],
        capture_output=True, text=True, timeout=60, check=True,
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert "ok" in result, result
    return result


@pytest.mark.parametrize("model", ["smart", "via-openai", "via-anthropic"])
def test_generate_text(fakes, model):
    for fake in (fakes["primary"], *fakes["kinds"].values()):
        fake.script({"content": "Hello from Vercel"})
    result = run(fakes, "text", model)
    assert result["ok"]["text"] == "Hello from Vercel", result
    assert result["ok"]["outputTokens"] == 3


@pytest.mark.parametrize("model", ["smart", "via-openai", "via-gemini"])
def test_stream_text(fakes, model):
    for fake in (fakes["primary"], *fakes["kinds"].values()):
        fake.script({"content": "one two three", "chunks": 3})
    result = run(fakes, "stream", model)
    assert result["ok"] == {"text": "one two three", "finishReason": "stop"}, result


@pytest.mark.parametrize("model", ["smart", "via-openai"])
def test_generate_object(fakes, model):
    for fake in (fakes["primary"], fakes["kinds"]["openai"]):
        fake.script({"content": '{"city":"Oslo"}'})
    result = run(fakes, "object", model)
    assert result["ok"]["object"] == {"city": "Oslo"}, result


@pytest.mark.parametrize("model", ["smart", "via-openai", "via-anthropic"])
def test_a_tool_round_trip(fakes, model):
    call = {"name": "get_weather", "arguments": {"city": "Oslo"}}
    for fake in (fakes["primary"], *fakes["kinds"].values()):
        fake.script({"content": "", "tool_calls": [call]}, {"content": "It is sunny in Oslo."})
    result = run(fakes, "tools", model)
    assert result["ok"]["calls"] == [{"name": "get_weather", "input": {"city": "Oslo"}}], result
    assert result["ok"]["text"] == "It is sunny in Oslo."


def test_served_by_a_fallback_step(fakes):
    fakes["primary"].script({"status": 500})
    fakes["kinds"]["anthropic"].script({"content": "from the fallback"})
    result = run(fakes, "text", "smart-claude")
    assert result["ok"]["text"] == "from the fallback", result
    assert result["ok"]["provider"] == "anthropic"


@pytest.mark.parametrize("model", ["smart", "via-openai"])
def test_a_mid_stream_failure_is_an_error(fakes, model):
    for fake in (fakes["primary"], fakes["kinds"]["openai"]):
        fake.script({"content": "a b c d", "chunks": 4, "error_after": 2})
    result = run(fakes, "broken", model)
    assert result["ok"]["text"] == "a b", result
    assert result["ok"]["errors"], result
