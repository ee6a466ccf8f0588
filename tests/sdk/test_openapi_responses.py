"""OpenAI's official OpenAPI schemas validate every Responses API body the gateway makes.

Passed-through bodies are the provider's; these are the gateway's own: Response objects it
translated from Anthropic and Gemini steps (a function call and a json_schema text format
included), every event of a stream it translated, the degraded tier's Response and stream,
the terminal `error` event of a stream that failed midway, its error bodies, and the stored
Response it answers GET /v1/responses/{id} with. The DELETE answer has no schema in the
description (it documents only "200 OK"), so its shape is checked by hand.
"""

import json

import pytest

from openapi import sse_json, validate
from test_openapi import call

# One component per stream event type the gateway emits.
EVENTS = {
    "response.created": "ResponseCreatedEvent",
    "response.in_progress": "ResponseInProgressEvent",
    "response.output_item.added": "ResponseOutputItemAddedEvent",
    "response.content_part.added": "ResponseContentPartAddedEvent",
    "response.output_text.delta": "ResponseTextDeltaEvent",
    "response.output_text.done": "ResponseTextDoneEvent",
    "response.content_part.done": "ResponseContentPartDoneEvent",
    "response.output_item.done": "ResponseOutputItemDoneEvent",
    "response.function_call_arguments.delta": "ResponseFunctionCallArgumentsDeltaEvent",
    "response.function_call_arguments.done": "ResponseFunctionCallArgumentsDoneEvent",
    "response.completed": "ResponseCompletedEvent",
    "response.incomplete": "ResponseIncompleteEvent",
    "response.failed": "ResponseFailedEvent",
    "error": "ResponseErrorEvent",
}
TOOLS = [{
    "type": "function", "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"], "additionalProperties": False},
    "strict": True,
}]
CALL = {"content": "", "tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}]}
JSON_SCHEMA = {"format": {
    "type": "json_schema", "name": "City", "strict": True,
    "schema": {"type": "object", "properties": {"city": {"type": "string"}},
               "required": ["city"], "additionalProperties": False},
}}


def respond(stack, model, stream=False, **extra):
    return call(stack, "/v1/responses", {"model": model, "input": "Hi", "stream": stream, **extra})


def validate_events(text):
    """Validates every event of a Responses stream; returns them."""
    events = sse_json(text)
    assert events, text
    for event in events:
        assert event.get("type") in EVENTS, f"unexpected event {event}"
        validate(EVENTS[event["type"]], event)
    return events


# (scripted behaviour, request fields, output item type the answer must hold)
CASES = {
    "text": ({"content": "Hello there"}, {}, "message"),
    "function_call": (CALL, {"tools": TOOLS}, "function_call"),
    "json_schema": ({"content": '{"city":"Oslo"}'}, {"text": JSON_SCHEMA}, "message"),
}


@pytest.mark.parametrize("kind", ["anthropic", "gemini"])
@pytest.mark.parametrize("case", list(CASES))
def test_translated_responses_are_schema_valid(fakes, kind, case):
    behavior, extra, item_type = CASES[case]
    fakes["kinds"][kind].script(behavior)
    status, text = respond(fakes, f"via-{kind}", **extra)
    assert status == 200, text
    response = json.loads(text)
    validate("Response", response)
    assert [item["type"] for item in response["output"]] == [item_type]


@pytest.mark.parametrize("kind", ["anthropic", "gemini"])
@pytest.mark.parametrize("case", list(CASES))
def test_translated_stream_events_are_schema_valid(fakes, kind, case):
    behavior, extra, item_type = CASES[case]
    fakes["kinds"][kind].script({**behavior, "chunks": 3})
    status, text = respond(fakes, f"via-{kind}", stream=True, **extra)
    assert status == 200, text
    types = [event["type"] for event in validate_events(text)]
    assert types[0] == "response.created" and types[-1] == "response.completed"
    if item_type == "function_call":
        assert "response.function_call_arguments.delta" in types
        assert "response.function_call_arguments.done" in types
    else:
        assert "response.output_text.delta" in types


@pytest.mark.parametrize("stream", [False, True])
def test_the_degraded_response_is_schema_valid(fakes, stream):
    fakes["kinds"]["openai"].script({"status": 503})
    status, text = respond(fakes, "degraded", stream=stream)
    assert "temporarily unavailable" in text, text
    assert status == 200, text
    if stream:
        assert validate_events(text)[-1]["type"] == "response.completed"
    else:
        validate("Response", json.loads(text))


@pytest.mark.parametrize("route", ["via-anthropic", "via-gemini", "passthrough"])
def test_the_mid_stream_error_event_is_schema_valid(fakes, route):
    for fake in (fakes["primary"], *fakes["kinds"].values()):
        fake.script({"content": "a b c d", "chunks": 4, "error_after": 2})
    status, text = respond(fakes, route, stream=True)
    assert status == 200, text
    events = sse_json(text)
    assert events[-1]["type"] == "error", events[-1]
    validate("ResponseErrorEvent", events[-1])
    if route == "passthrough":  # the earlier events are the provider's, passed through
        assert fakes["primary"].requests()[-1]["path"] == "/v1/responses"
    else:
        validate_events(text)


def test_the_responses_errors_are_schema_valid(fakes):
    for status, text in [
        respond(fakes, "smart", frobnicate=True),
        respond(fakes, "no-such-route"),
        call(fakes, "/v1/responses", b"{not json"),
        call(fakes, "/v1/responses", {"model": "smart"}),
        call(fakes, "/v1/responses/resp_unknown"),
        call(fakes, "/v1/responses/resp_unknown", method="DELETE"),
    ]:
        assert status in (400, 404), text
        validate("ErrorResponse", json.loads(text))
    assert respond(fakes, "smart", frobnicate=True)[0] == 400
    assert call(fakes, "/v1/responses/resp_unknown")[0] == 404


# A passed-through answer is stored as the provider gave it; these are the gateway's own.
@pytest.mark.parametrize("route", ["via-anthropic", "via-gemini"])
def test_a_stored_response_and_its_deletion_are_schema_valid(fakes, route):
    fakes["kinds"][route.removeprefix("via-")].script({"content": "Stored."})
    status, text = respond(fakes, route)
    assert status == 200, text
    created = json.loads(text)
    status, text = call(fakes, f"/v1/responses/{created['id']}")
    assert status == 200, text
    validate("Response", json.loads(text))
    assert json.loads(text)["id"] == created["id"]
    status, text = call(fakes, f"/v1/responses/{created['id']}", method="DELETE")
    assert status == 200, text
    assert json.loads(text) == {"id": created["id"], "object": "response", "deleted": True}
