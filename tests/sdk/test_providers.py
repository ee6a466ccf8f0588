"""The official openai and anthropic SDKs against every provider kind, through the gateway.

For each kind (openai, anthropic, gemini, azure, Vertex with a Gemini and a Claude model, and
Bedrock, signed), each SDK gets a whole answer, a stream,
a tool-call round trip, and an upstream error raised as its own exception with the status.
"""

import json

import anthropic
import openai
import pytest

from conftest import KINDS

WEATHER_OPENAI = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the weather for a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]
WEATHER_ANTHROPIC = [
    {
        "name": "get_weather",
        "description": "Get the weather for a city",
        "input_schema": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    }
]
CALL = {"content": "Let me check.", "tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}]}


@pytest.mark.parametrize("kind", KINDS)
def test_openai_sdk_whole_answer(openai_client, fakes, kind):
    fakes["kinds"][kind].script({"content": f"hello via {kind}"})
    completion = openai_client.chat.completions.create(
        model=f"via-{kind}", messages=[{"role": "user", "content": "Hi"}]
    )
    assert completion.choices[0].message.content == f"hello via {kind}"
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage.completion_tokens == 3


@pytest.mark.parametrize("kind", KINDS)
def test_openai_sdk_stream(openai_client, fakes, kind):
    fakes["kinds"][kind].script({"content": "one two three", "chunks": 3})
    stream = openai_client.chat.completions.create(
        model=f"via-{kind}",
        messages=[{"role": "user", "content": "Hi"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "one two three"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage.completion_tokens == 3


@pytest.mark.parametrize("kind", KINDS)
def test_openai_sdk_tool_call_round_trip(openai_client, fakes, kind):
    fake = fakes["kinds"][kind]
    fake.script(CALL)
    messages = [{"role": "user", "content": "Weather in Oslo?"}]
    first = openai_client.chat.completions.create(
        model=f"via-{kind}", messages=messages, tools=WEATHER_OPENAI
    )
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    call = choice.message.tool_calls[0]
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Oslo"}

    fake.script({"content": "It is -3C in Oslo."})
    messages += [
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "-3C"},
    ]
    second = openai_client.chat.completions.create(
        model=f"via-{kind}", messages=messages, tools=WEATHER_OPENAI
    )
    assert second.choices[0].message.content == "It is -3C in Oslo."
    sent = json.loads(fake.requests()[-1]["body"])
    assert "-3C" in json.dumps(sent), "the tool result reached the provider"


@pytest.mark.parametrize("kind", KINDS)
def test_openai_sdk_error_is_its_own_exception(openai_client, fakes, kind):
    fakes["kinds"][kind].script({"status": 400})
    with pytest.raises(openai.BadRequestError) as raised:
        openai_client.chat.completions.create(
            model=f"via-{kind}", messages=[{"role": "user", "content": "Hi"}]
        )
    assert raised.value.status_code == 400
    assert "fake upstream answered 400" in str(raised.value)


@pytest.mark.parametrize("kind", KINDS)
def test_anthropic_sdk_whole_answer(anthropic_client, fakes, kind):
    fakes["kinds"][kind].script({"content": f"hello via {kind}"})
    message = anthropic_client.messages.create(
        model=f"via-{kind}", max_tokens=100, messages=[{"role": "user", "content": "Hi"}]
    )
    assert message.content[0].text == f"hello via {kind}"
    assert message.stop_reason == "end_turn"
    assert message.usage.output_tokens == 3


@pytest.mark.parametrize("kind", KINDS)
def test_anthropic_sdk_stream(anthropic_client, fakes, kind):
    fakes["kinds"][kind].script({"content": "one two three", "chunks": 3})
    with anthropic_client.messages.stream(
        model=f"via-{kind}", max_tokens=100, messages=[{"role": "user", "content": "Hi"}]
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "one two three"
    assert final.stop_reason == "end_turn"
    assert final.usage.output_tokens == 3


@pytest.mark.parametrize("kind", KINDS)
def test_anthropic_sdk_tool_call_round_trip(anthropic_client, fakes, kind):
    fake = fakes["kinds"][kind]
    fake.script(CALL)
    messages = [{"role": "user", "content": "Weather in Oslo?"}]
    with anthropic_client.messages.stream(
        model=f"via-{kind}", max_tokens=200, messages=messages, tools=WEATHER_ANTHROPIC
    ) as stream:
        first = stream.get_final_message()
    assert first.stop_reason == "tool_use"
    tool_use = next(block for block in first.content if block.type == "tool_use")
    assert tool_use.name == "get_weather"
    assert tool_use.input == {"city": "Oslo"}

    fake.script({"content": "It is -3C in Oslo."})
    messages += [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": tool_use.id, "content": "-3C"}],
        },
    ]
    second = anthropic_client.messages.create(
        model=f"via-{kind}", max_tokens=200, messages=messages, tools=WEATHER_ANTHROPIC
    )
    assert second.content[0].text == "It is -3C in Oslo."
    sent = json.loads(fake.requests()[-1]["body"])
    assert "-3C" in json.dumps(sent), "the tool result reached the provider"


@pytest.mark.parametrize("kind", KINDS)
def test_anthropic_sdk_error_is_its_own_exception(anthropic_client, fakes, kind):
    fakes["kinds"][kind].script({"status": 422})
    with pytest.raises(anthropic.UnprocessableEntityError) as raised:
        anthropic_client.messages.create(
            model=f"via-{kind}", max_tokens=100, messages=[{"role": "user", "content": "Hi"}]
        )
    assert raised.value.status_code == 422


def test_anthropic_sdk_unknown_model_is_not_found(anthropic_client):
    with pytest.raises(anthropic.NotFoundError):
        anthropic_client.messages.create(
            model="nope", max_tokens=10, messages=[{"role": "user", "content": "Hi"}]
        )


def test_anthropic_sdk_mid_stream_error_raises(anthropic_client, fakes):
    fakes["kinds"]["anthropic"].script(
        {"content": "a b c d", "chunks": 4, "error_after": 2}
    )
    received = []
    with pytest.raises(anthropic.APIStatusError) as raised:
        with anthropic_client.messages.stream(
            model="via-anthropic", max_tokens=100, messages=[{"role": "user", "content": "Hi"}]
        ) as stream:
            for text in stream.text_stream:
                received.append(text)
    assert "".join(received) == "a b"
    assert "Overloaded" in str(raised.value)


def test_cross_vendor_chain_serves_both_sdks(openai_client, anthropic_client, fakes):
    """An Anthropic primary answers 529; the OpenAI-shaped secondary serves, in each SDK's shape."""
    fakes["kinds"]["anthropic"].script({"status": 529})
    fakes["secondary"].script({"content": "served by the secondary"})
    raw = openai_client.chat.completions.with_raw_response.create(
        model="cross", messages=[{"role": "user", "content": "Hi"}]
    )
    assert raw.headers["x-switchyard-step"] == "1"
    assert raw.parse().choices[0].message.content == "served by the secondary"
    stream = openai_client.chat.completions.create(
        model="cross", messages=[{"role": "user", "content": "Hi"}], stream=True
    )
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == (
        "served by the secondary"
    )

    raw = anthropic_client.messages.with_raw_response.create(
        model="cross", max_tokens=100, messages=[{"role": "user", "content": "Hi"}]
    )
    assert raw.headers["x-switchyard-outcome"] == "fallback"
    assert raw.parse().content[0].text == "served by the secondary"
    with anthropic_client.messages.stream(
        model="cross", max_tokens=100, messages=[{"role": "user", "content": "Hi"}]
    ) as stream:
        assert "".join(stream.text_stream) == "served by the secondary"
