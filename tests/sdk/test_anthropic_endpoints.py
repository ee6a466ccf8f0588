"""The anthropic SDK's other calls: structured output served by an OpenAI-family step,
token counting, model retrieval, and a rate limit it raises as its own RateLimitError."""

import json

import anthropic
import pydantic
import pytest


class Person(pydantic.BaseModel):
    name: str
    age: int


def test_messages_parse_through_an_openai_step(anthropic_client, fakes):
    fake = fakes["kinds"]["openai"]
    fake.script({"content": '{"name": "Ada Lovelace", "age": 36}'})
    parsed = anthropic_client.messages.parse(
        model="via-openai",
        max_tokens=200,
        messages=[{"role": "user", "content": "Who wrote the first program?"}],
        output_format=Person,
    )
    assert parsed.parsed_output == Person(name="Ada Lovelace", age=36)
    sent = json.loads(fake.requests()[-1]["body"])
    assert sent["response_format"]["type"] == "json_schema"
    schema = sent["response_format"]["json_schema"]["schema"]
    assert set(schema["properties"]) == {"name", "age"}


def test_count_tokens_on_an_anthropic_step(anthropic_client, fakes):
    counted = anthropic_client.messages.count_tokens(
        model="via-anthropic", messages=[{"role": "user", "content": "Hello, Claude"}]
    )
    assert counted.input_tokens > 0
    assert fakes["kinds"]["anthropic"].requests()[-1]["path"] == "/v1/messages/count_tokens"


def test_count_tokens_on_another_provider_is_a_bad_request(anthropic_client):
    with pytest.raises(anthropic.BadRequestError) as raised:
        anthropic_client.messages.count_tokens(
            model="via-openai", messages=[{"role": "user", "content": "Hi"}]
        )
    assert "Anthropic" in str(raised.value)


def test_models_retrieve_and_list(anthropic_client):
    model = anthropic_client.models.retrieve("via-openai")
    assert model.id == "via-openai"
    assert model.type == "model"
    assert model.created_at.year == 1970
    ids = [m.id for m in anthropic_client.models.list(limit=2)]
    assert "via-anthropic" in ids and "cross" in ids, "auto-pagination reaches every page"
    with pytest.raises(anthropic.NotFoundError):
        anthropic_client.models.retrieve("nope")


def test_a_rate_limit_everywhere_is_the_sdks_rate_limit_error(anthropic_client, fakes):
    fakes["kinds"]["anthropic"].script({"status": 429, "headers": {"retry-after": "1"}})
    with pytest.raises(anthropic.RateLimitError) as raised:
        anthropic_client.messages.create(
            model="limited", max_tokens=10, messages=[{"role": "user", "content": "Hi"}]
        )
    assert raised.value.status_code == 429
    assert "retry-after-ms" in raised.value.response.headers
