"""OpenAI's official OpenAPI schemas validate every body the gateway makes itself.

Passed-through bodies are the provider's; these are the gateway's own: its errors (JSON and
the mid-stream error event), the degraded answer (JSON and stream chunks), answers it
translated from Anthropic and Gemini (JSON and stream chunks, tool calls included), and the
models list.
"""

import json
import urllib.error
import urllib.request

import pytest

from openapi import sse_json, validate

MESSAGES = [{"role": "user", "content": "Hi"}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
CALL = {"content": "Let me check.", "tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}]}


def call(stack, path, body=None, method=None):
    """(status, body text) of a request to the gateway."""
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    request = urllib.request.Request(
        stack["root"] + path,
        data=data,
        method=method or ("POST" if data is not None else "GET"),
        headers={"content-type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=15) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def chat(stack, model, stream=False, **extra):
    body = {"model": model, "messages": MESSAGES, "stream": stream, **extra}
    return call(stack, "/v1/chat/completions", body)


@pytest.mark.parametrize("stream", [False, True])
def test_the_degraded_answer_is_schema_valid(fakes, stream):
    fakes["primary"].script({"status": 503})
    fakes["secondary"].script({"status": 502})
    status, text = chat(fakes, "smart", stream=stream, stream_options={"include_usage": True} if stream else None)
    assert status == 200
    if stream:
        chunks = sse_json(text)
        assert chunks
        for chunk in chunks:
            validate("CreateChatCompletionStreamResponse", chunk)
    else:
        validate("CreateChatCompletionResponse", json.loads(text))


@pytest.mark.parametrize("kind", ["anthropic", "gemini"])
@pytest.mark.parametrize("behavior", [{}, CALL])
def test_translated_answers_are_schema_valid(fakes, kind, behavior):
    fakes["kinds"][kind].script(behavior)
    status, text = chat(fakes, f"via-{kind}", tools=TOOLS)
    assert status == 200, text
    validate("CreateChatCompletionResponse", json.loads(text))
    fakes["kinds"][kind].script(behavior)
    status, text = chat(fakes, f"via-{kind}", stream=True, tools=TOOLS,
                        stream_options={"include_usage": True})
    assert status == 200, text
    chunks = sse_json(text)
    assert len(chunks) > 2
    for chunk in chunks:
        validate("CreateChatCompletionStreamResponse", chunk)


def test_the_gateways_errors_are_schema_valid(fakes):
    for status, text in [
        chat(fakes, "no-such-route"),
        call(fakes, "/v1/chat/completions", b"{not json"),
        call(fakes, "/v1/chat/completions", {"model": "smart"}),
        call(fakes, "/v1/nowhere"),
        call(fakes, "/v1/completions", {"model": "via-anthropic", "prompt": "Hi"}),
    ]:
        assert status >= 400, text
        validate("ErrorResponse", json.loads(text))
    # Every step failed and the route has no degraded tier.
    fakes["kinds"]["anthropic"].script({"status": 500})
    fakes["secondary"].script({"status": 500})
    status, text = chat(fakes, "cross")
    assert status == 503
    validate("ErrorResponse", json.loads(text))
    # An Anthropic error translated into OpenAI's shape.
    fakes["kinds"]["anthropic"].script({"status": 400})
    status, text = chat(fakes, "via-anthropic")
    assert status == 400
    validate("ErrorResponse", json.loads(text))


def test_the_mid_stream_error_event_is_schema_valid(fakes):
    fakes["kinds"]["anthropic"].script({"content": "a b c d", "chunks": 4, "error_after": 2})
    status, text = chat(fakes, "via-anthropic", stream=True)
    assert status == 200
    *chunks, error = sse_json(text)
    for chunk in chunks:
        validate("CreateChatCompletionStreamResponse", chunk)
    validate("ErrorResponse", error)


def test_the_models_list_is_schema_valid(fakes):
    status, text = call(fakes, "/v1/models")
    assert status == 200
    validate("ListModelsResponse", json.loads(text))
    status, text = call(fakes, "/v1/models/via-openai")
    assert status == 200
    validate("Model", json.loads(text))
