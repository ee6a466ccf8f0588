"""The official openai SDK's Responses API (`client.responses`) through the gateway:
passed through to a provider that speaks it, translated for every other step."""

import json

import openai
import pydantic
import pytest


def sent_body(fake):
    return json.loads(fake.requests()[-1]["body"])


def test_a_plain_response(openai_client, fakes):
    fakes["primary"].script({"content": "Hello from the Responses API"})
    response = openai_client.responses.create(model="smart", input="Hello", instructions="Be brief.")
    assert response.output_text == "Hello from the Responses API"
    assert response.usage.output_tokens == 5
    assert fakes["primary"].requests()[-1]["path"] == "/v1/responses"


@pytest.mark.parametrize("route", ["smart", "via-openai", "via-anthropic", "via-gemini"])
def test_a_streamed_response(openai_client, fakes, route):
    for fake in (fakes["primary"], *fakes["kinds"].values()):
        fake.script({"content": "one two three", "chunks": 3})
    deltas = []
    # The SDK's stream helper checks the event sequence as it accumulates the response.
    with openai_client.responses.stream(model=route, input="Count") as stream:
        for event in stream:
            if event.type == "response.output_text.delta":
                deltas.append(event.delta)
        final = stream.get_final_response()
    assert "".join(deltas) == "one two three"
    assert final.output_text == "one two three"
    assert final.status == "completed"
    assert final.usage.output_tokens == 3


@pytest.mark.parametrize("route", ["smart", "via-openai", "via-anthropic"])
def test_a_function_tool_round_trip(openai_client, fakes, route):
    call = {"name": "get_weather", "arguments": {"city": "Oslo"}}
    for fake in (fakes["primary"], *fakes["kinds"].values()):
        fake.script({"content": "", "tool_calls": [call]}, {"content": "It is sunny in Oslo."})
    tools = [{
        "type": "function", "name": "get_weather", "description": "Weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"], "additionalProperties": False},
        "strict": True,
    }]
    first = openai_client.responses.create(model=route, input="Weather in Oslo?", tools=tools, store=False)
    calls = [item for item in first.output if item.type == "function_call"]
    assert len(calls) == 1
    assert calls[0].name == "get_weather"
    assert json.loads(calls[0].arguments) == {"city": "Oslo"}
    history = [{"role": "user", "content": "Weather in Oslo?"}, *first.output,
               {"type": "function_call_output", "call_id": calls[0].call_id, "output": "sunny"}]
    second = openai_client.responses.create(model=route, input=history, tools=tools, store=False)
    assert second.output_text == "It is sunny in Oslo."


class City(pydantic.BaseModel):
    city: str


@pytest.mark.parametrize("route", ["smart", "via-openai"])
def test_a_json_schema_text_format(openai_client, fakes, route):
    for fake in (fakes["primary"], fakes["kinds"]["openai"]):
        fake.script({"content": '{"city":"Oslo"}'})
    parsed = openai_client.responses.parse(model=route, input="Which city?", text_format=City)
    assert parsed.output_parsed == City(city="Oslo")
    if route == "via-openai":
        sent = sent_body(fakes["kinds"]["openai"])
        assert sent["response_format"]["type"] == "json_schema"
        assert sent["response_format"]["json_schema"]["schema"]["required"] == ["city"]
        assert sent["response_format"]["json_schema"]["strict"] is True


@pytest.mark.parametrize("route,fallback", [("smart", "secondary"), ("smart-claude", "anthropic")])
def test_served_by_a_fallback_step_of_another_provider(openai_client, fakes, route, fallback):
    fakes["primary"].script({"status": 500})
    fake = fakes["secondary"] if fallback == "secondary" else fakes["kinds"]["anthropic"]
    fake.script({"content": "from the fallback"})
    raw = openai_client.responses.with_raw_response.create(model=route, input="Hello")
    assert raw.headers["x-switchyard-outcome"] == "fallback"
    assert raw.headers["x-switchyard-provider"] == fallback
    assert raw.parse().output_text == "from the fallback"
    fakes["primary"].script({"status": 500})
    with openai_client.responses.stream(model=route, input="Hello") as stream:
        assert stream.get_final_response().output_text == "from the fallback"


def test_previous_response_id_across_two_providers(openai_client, fakes):
    fakes["primary"].script({"content": "Noted, Ada."}, {"status": 500})
    fakes["kinds"]["anthropic"].script({"content": "You are Ada."})
    first = openai_client.responses.create(model="smart-claude", input="My name is Ada.")
    second = openai_client.responses.with_raw_response.create(
        model="smart-claude", input="What is my name?", previous_response_id=first.id
    )
    assert second.headers["x-switchyard-provider"] == "anthropic"
    assert second.parse().output_text == "You are Ada."
    sent = sent_body(fakes["kinds"]["anthropic"])
    texts = [block["text"] for message in sent["messages"] for block in message["content"]]
    assert texts == ["My name is Ada.", "Noted, Ada.", "What is my name?"]
    assert openai_client.responses.retrieve(first.id).output_text == "Noted, Ada."
    openai_client.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError):
        openai_client.responses.retrieve(first.id)


@pytest.mark.parametrize("route", ["smart", "via-openai"])
def test_a_mid_stream_failure_raises_the_sdks_error(openai_client, fakes, route):
    for fake in (fakes["primary"], fakes["kinds"]["openai"]):
        fake.script({"content": "a b c d", "chunks": 4, "error_after": 2})
    deltas = []
    stream = openai_client.responses.create(model=route, input="Hello", stream=True)
    with pytest.raises(openai.APIError):
        for event in stream:
            if event.type == "response.output_text.delta":
                deltas.append(event.delta)
    assert "".join(deltas) == "a b"


def test_an_unknown_field_is_refused(openai_client, fakes):
    calls = fakes["primary"].stats()["calls"]
    with pytest.raises(openai.BadRequestError) as raised:
        openai_client.responses.create(model="smart", input="Hello", extra_body={"frobnicate": True})
    assert raised.value.param == "frobnicate"
    assert fakes["primary"].stats()["calls"] == calls
