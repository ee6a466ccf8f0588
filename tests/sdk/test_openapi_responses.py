"""OpenAI's official OpenAPI schemas validate every Responses API body the gateway makes.

Response objects the gateway translated from Anthropic and Gemini steps (a function call,
with its tool sent with and without `strict`, and a json_schema text format included), every
event of a stream it translated, the degraded tier's Response and stream, the terminal `error`
event of a stream that failed midway, its error bodies, and the stored Response it answers
GET /v1/responses/{id} with. A passed-through Response is the provider's, but the gateway
completes what it lacks: a provider that leaves out required fields, and echoes a tool as
sent, still gives a schema-valid Response. Every Response also holds every field the Open
Responses specification requires (`OPEN_RESPONSES_REQUIRED`). The DELETE answer has no schema
in the description (it documents only "200 OK"), so its shape is checked by hand.
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
# As clients often send one: no `strict`, no `parameters`. OpenAI's `FunctionTool` requires
# both in the Response that echoes it.
LOOSE_TOOLS = [{"type": "function", "name": "get_weather", "description": "The weather in a city"}]
CALL = {"content": "", "tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}]}
# The Open Responses specification's `ResponseResource` requires these, less `user` and
# `usage`: OpenAI's schema types those as a string and an object, never null, so the gateway
# leaves them out when no `user` was sent and while the usage is unknown.
OPEN_RESPONSES_REQUIRED = [
    "id", "object", "created_at", "completed_at", "status", "incomplete_details", "model",
    "previous_response_id", "instructions", "output", "error", "tools", "tool_choice",
    "truncation", "parallel_tool_calls", "text", "top_p", "presence_penalty",
    "frequency_penalty", "top_logprobs", "temperature", "reasoning", "max_output_tokens",
    "max_tool_calls", "store", "background", "service_tier", "metadata", "safety_identifier",
    "prompt_cache_key",
]
JSON_SCHEMA = {"format": {
    "type": "json_schema", "name": "City", "strict": True,
    "schema": {"type": "object", "properties": {"city": {"type": "string"}},
               "required": ["city"], "additionalProperties": False},
}}


def respond(stack, model, stream=False, **extra):
    return call(stack, "/v1/responses", {"model": model, "input": "Hi", "stream": stream, **extra})


def validate_response(response):
    """Validates a Response object against OpenAI's schema and the Open Responses list."""
    validate("Response", response)
    missing = [field for field in OPEN_RESPONSES_REQUIRED if field not in response]
    assert not missing, f"the Response lacks {missing}: {response}"


def validate_events(text):
    """Validates every event of a Responses stream, and the Response of those carrying one;
    returns them."""
    events = sse_json(text)
    assert events, text
    for event in events:
        assert event.get("type") in EVENTS, f"unexpected event {event}"
        validate(EVENTS[event["type"]], event)
        if "response" in event:
            validate_response(event["response"])
    return events


# (scripted behaviour, request fields, output item type the answer must hold)
CASES = {
    "text": ({"content": "Hello there"}, {}, "message"),
    "function_call": (CALL, {"tools": TOOLS}, "function_call"),
    "function_call_loose_tool": (CALL, {"tools": LOOSE_TOOLS}, "function_call"),
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
    validate_response(response)
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
        validate_response(json.loads(text))


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


@pytest.mark.parametrize("route", ["via-anthropic", "via-gemini", "passthrough"])
def test_a_stored_response_and_its_deletion_are_schema_valid(fakes, route):
    if route == "passthrough":  # as completed by the gateway
        fakes["primary"].script({"body": json.dumps(provider_response(LOOSE_TOOLS))})
    else:
        fakes["kinds"][route.removeprefix("via-")].script({"content": "Stored."})
    status, text = respond(fakes, route)
    assert status == 200, text
    created = json.loads(text)
    status, text = call(fakes, f"/v1/responses/{created['id']}")
    assert status == 200, text
    validate_response(json.loads(text))
    assert json.loads(text)["id"] == created["id"]
    status, text = call(fakes, f"/v1/responses/{created['id']}", method="DELETE")
    assert status == 200, text
    assert json.loads(text) == {"id": created["id"], "object": "response", "deleted": True}


def provider_response(tools, status="completed", output=(), usage=True):
    """A Response as a provider that speaks the Responses API might make it: only the fields
    OpenAI's schema requires, its tools echoed as they were sent."""
    response = {
        "id": "resp_provider", "object": "response", "created_at": 1_700_000_000,
        "status": status, "model": "passthrough", "error": None, "incomplete_details": None,
        "instructions": None, "output": list(output), "tools": tools, "tool_choice": "auto",
        "parallel_tool_calls": True, "metadata": {}, "temperature": 1.0, "top_p": 1.0,
    }
    if usage:
        response["usage"] = {
            "input_tokens": 5, "output_tokens": 2, "total_tokens": 7,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        }
    return response


def provider_stream(tools):
    """That provider's stream of a function call, as SSE text."""
    arguments = json.dumps({"city": "Oslo"})
    item = {"id": "fc_1", "type": "function_call", "status": "completed", "call_id": "call_1",
            "name": "get_weather", "arguments": arguments}
    started = {"response": provider_response(tools, "in_progress", usage=False)}
    events = [
        ("response.created", started),
        ("response.in_progress", started),
        ("response.output_item.added",
         {"output_index": 0, "item": {**item, "status": "in_progress", "arguments": ""}}),
        ("response.function_call_arguments.delta",
         {"item_id": "fc_1", "output_index": 0, "delta": arguments}),
        ("response.function_call_arguments.done",
         {"item_id": "fc_1", "output_index": 0, "name": "get_weather", "arguments": arguments}),
        ("response.output_item.done", {"output_index": 0, "item": item}),
        ("response.completed", {"response": provider_response(tools, output=[item])}),
    ]
    return "".join(
        f"event: {name}\ndata: {json.dumps({'type': name, 'sequence_number': i, **data})}\n\n"
        for i, (name, data) in enumerate(events)
    )


@pytest.mark.parametrize("tools", [TOOLS, LOOSE_TOOLS], ids=["strict", "loose"])
@pytest.mark.parametrize("stream", [False, True])
def test_passed_through_responses_are_completed_to_the_schema(fakes, tools, stream):
    body = provider_stream(tools) if stream else json.dumps(provider_response(tools))
    fakes["primary"].script({"body": body})
    status, text = respond(fakes, "passthrough", stream=stream, tools=tools)
    assert status == 200, text
    assert fakes["primary"].requests()[-1]["path"] == "/v1/responses"
    if stream:
        events = validate_events(text)
        assert events[-1]["type"] == "response.completed"
        responses = [event["response"] for event in events if "response" in event]
        assert len(responses) == 3
    else:
        responses = [json.loads(text)]
        validate_response(responses[0])
    for response in responses:
        assert response["id"] == "resp_provider", "the provider's own Response, completed"
        assert [tool["name"] for tool in response["tools"]] == ["get_weather"]
