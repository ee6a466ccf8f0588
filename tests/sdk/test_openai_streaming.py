"""The official openai SDK streaming through the gateway."""

import openai
import pytest

MESSAGES = [{"role": "user", "content": "Hello"}]


def collect(stream):
    return "".join(
        chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices
    )


def test_a_normal_stream(client, stack):
    stack["primary"].script({"content": "one two three", "chunks": 3})
    stream = client.chat.completions.create(model="smart", messages=MESSAGES, stream=True)
    assert collect(stream) == "one two three"


def test_a_fallback_before_the_first_token(client, stack):
    stack["primary"].script({"status": 500})
    stack["secondary"].script({"content": "from the fallback"})
    raw = client.chat.completions.with_raw_response.create(
        model="smart", messages=MESSAGES, stream=True
    )
    assert raw.headers["x-switchyard-step"] == "1"
    assert raw.headers["x-switchyard-outcome"] == "fallback"
    assert collect(raw.parse()) == "from the fallback"


def test_a_degraded_stream_parses(client, stack):
    stack["primary"].script({"status": 503})
    stack["secondary"].script({"status": 502})
    stream = client.chat.completions.create(model="smart", messages=MESSAGES, stream=True)
    assert collect(stream) == "The assistant is temporarily unavailable."


def test_a_mid_stream_failure_raises_instead_of_truncating(client, stack):
    stack["primary"].script(
        {"content": "a b c d", "chunks": 4, "chunk_interval_ms": 50, "drop_after": 2}
    )
    secondary_calls = stack["secondary"].stats()["calls"]
    stream = client.chat.completions.create(model="smart", messages=MESSAGES, stream=True)
    received = []
    with pytest.raises(openai.APIError) as raised:
        for chunk in stream:
            if chunk.choices:
                received.append(chunk.choices[0].delta.content or "")
    assert "".join(received) == "a b"
    assert "mid-stream" in str(raised.value)
    assert stack["secondary"].stats()["calls"] == secondary_calls, "no other model spliced in"


def test_a_usage_chunk_when_asked_for(client, stack):
    stack["primary"].script({"content": "one two three"})
    stream = client.chat.completions.create(
        model="smart",
        messages=MESSAGES,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert chunks[-1].usage.completion_tokens == 3


def test_a_non_streamed_completion(client, stack):
    completion = client.chat.completions.create(model="smart", messages=MESSAGES)
    assert completion.choices[0].message.content == "Hello from primary!"


def test_an_unknown_model_is_the_sdks_not_found_error(client):
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="nope", messages=MESSAGES)
