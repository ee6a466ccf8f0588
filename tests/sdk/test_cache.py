"""The response cache seen through the official SDKs: a kept whole answer replayed as a
stream, and a kept stream served whole, with the same content, finish reason and usage."""

import uuid


def ask(text):
    return [{"role": "user", "content": text}]


def test_openai_stream_replayed_from_a_kept_answer(openai_client, fakes):
    fakes["kinds"]["openai"].script({"content": "Kept for later."})
    messages = ask(f"cache me {uuid.uuid4()}")
    raw = openai_client.chat.completions.with_raw_response.create(
        model="cached", messages=messages
    )
    assert raw.headers["x-switchyard-cache"] == "miss"
    whole = raw.parse()
    calls = fakes["kinds"]["openai"].stats()["calls"]

    raw = openai_client.chat.completions.with_raw_response.create(
        model="cached",
        messages=messages,
        stream=True,
        stream_options={"include_usage": True},
    )
    assert raw.headers["x-switchyard-cache"] == "hit"
    chunks = list(raw.parse())
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content == "Kept for later."
    finish = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finish[-1] == whole.choices[0].finish_reason
    usage = chunks[-1].usage
    assert usage.prompt_tokens == whole.usage.prompt_tokens
    assert usage.completion_tokens == whole.usage.completion_tokens
    assert fakes["kinds"]["openai"].stats()["calls"] == calls, "no upstream call"


def test_anthropic_stream_replayed_from_a_kept_message(anthropic_client, fakes):
    fakes["kinds"]["openai"].script({"content": "Kept for Claude's clients."})
    messages = ask(f"cache me {uuid.uuid4()}")
    whole = anthropic_client.messages.create(model="cached", max_tokens=64, messages=messages)
    calls = fakes["kinds"]["openai"].stats()["calls"]

    with anthropic_client.messages.stream(
        model="cached", max_tokens=64, messages=messages
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == whole.content[0].text == "Kept for Claude's clients."
    assert final.stop_reason == whole.stop_reason
    assert final.usage.input_tokens == whole.usage.input_tokens
    assert final.usage.output_tokens == whole.usage.output_tokens
    assert fakes["kinds"]["openai"].stats()["calls"] == calls, "no upstream call"


def test_openai_json_served_from_a_kept_stream(openai_client, fakes):
    fakes["kinds"]["openai"].script({"content": "Streamed once.", "chunks": 2})
    messages = ask(f"cache me {uuid.uuid4()}")
    stream = openai_client.chat.completions.create(
        model="cached", messages=messages, stream=True
    )
    streamed = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    calls = fakes["kinds"]["openai"].stats()["calls"]

    raw = openai_client.chat.completions.with_raw_response.create(
        model="cached", messages=messages
    )
    assert raw.headers["x-switchyard-cache"] == "hit"
    whole = raw.parse()
    assert whole.choices[0].message.content == streamed == "Streamed once."
    assert whole.choices[0].finish_reason == "stop"
    assert whole.usage.completion_tokens > 0, "usage kept though the stream did not ask"
    assert fakes["kinds"]["openai"].stats()["calls"] == calls, "no upstream call"


def test_anthropic_json_served_from_a_kept_stream(anthropic_client, fakes):
    fakes["kinds"]["openai"].script({"content": "Streamed for Claude's clients.", "chunks": 2})
    messages = ask(f"cache me {uuid.uuid4()}")
    with anthropic_client.messages.stream(
        model="cached", max_tokens=64, messages=messages
    ) as stream:
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    calls = fakes["kinds"]["openai"].stats()["calls"]

    whole = anthropic_client.messages.create(model="cached", max_tokens=64, messages=messages)
    assert whole.content[0].text == streamed == "Streamed for Claude's clients."
    assert whole.stop_reason == final.stop_reason
    assert whole.usage.output_tokens == final.usage.output_tokens
    assert fakes["kinds"]["openai"].stats()["calls"] == calls, "no upstream call"


def test_openai_responses_stream_replayed_from_a_kept_response(openai_client, fakes):
    fakes["kinds"]["openai"].script({"content": "Kept as a response."})
    said = f"cache me {uuid.uuid4()}"
    raw = openai_client.responses.with_raw_response.create(model="cached", input=said)
    assert raw.headers["x-switchyard-cache"] == "miss"
    whole = raw.parse()
    calls = fakes["kinds"]["openai"].stats()["calls"]

    with openai_client.responses.stream(model="cached", input=said) as stream:
        text = "".join(e.delta for e in stream if e.type == "response.output_text.delta")
        final = stream.get_final_response()
    assert text == final.output_text == whole.output_text == "Kept as a response."
    assert final.id != whole.id, "a hit is a response of its own"
    assert final.usage.input_tokens == whole.usage.input_tokens
    assert final.usage.output_tokens == whole.usage.output_tokens
    assert fakes["kinds"]["openai"].stats()["calls"] == calls, "no upstream call"

    # The hit's turn is stored: a next turn continues from its id.
    fakes["kinds"]["openai"].script({"content": "Continued."})
    after = openai_client.responses.create(
        model="cached", input="And then?", previous_response_id=final.id
    )
    assert after.output_text == "Continued."


def test_openai_legacy_completion_stream_replayed_from_a_kept_completion(openai_client, fakes):
    fakes["kinds"]["openai"].script({"content": "Once upon a time."})
    prompt = f"cache me {uuid.uuid4()}"
    whole = openai_client.completions.create(model="cached", prompt=prompt, max_tokens=16)
    calls = fakes["kinds"]["openai"].stats()["calls"]

    raw = openai_client.completions.with_raw_response.create(
        model="cached",
        prompt=prompt,
        max_tokens=16,
        stream=True,
        stream_options={"include_usage": True},
    )
    assert raw.headers["x-switchyard-cache"] == "hit"
    chunks = list(raw.parse())
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == whole.choices[0].text == "Once upon a time."
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    assert fakes["kinds"]["openai"].stats()["calls"] == calls, "no upstream call"
