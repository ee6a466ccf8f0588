"""The fake's Bedrock against boto3: botocore signs each request (SigV4) and reads each
ConverseStream (checking every event stream CRC) with code of its own, so the fake's
hand-written verifier and frame writer are held to a second, independent implementation.

Answers, streams and tool calls come back as botocore parses them; a wrong secret, an unknown
key, a missing session token and a scripted 429 are refused with the exceptions AWS raises.
"""

import json

import boto3
import botocore.exceptions
import pytest
from botocore.config import Config

from conftest import Fake

KEY = "AKIDFAKEBEDROCK"
# A secret with the characters real ones have, `/` and `+` among them.
SECRET = "fake/Secret+Key0123456789abcdefghijklmno"
TOKEN = "FwoGZXIvYXdzEFAKE//////////wEaDFakeSessionToken+/="
MODEL = "us.anthropic.claude-3-5-haiku-20241022-v1:0"
MESSAGES = [{"role": "user", "content": [{"text": "What is the weather in Paris?"}]}]
WEATHER = {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}


def stop(fake):
    fake.process.terminate()
    fake.process.wait(timeout=10)


@pytest.fixture(scope="module")
def fake():
    fake = Fake("bedrock", "--aws-credentials", f"{KEY}:{SECRET}")
    yield fake
    stop(fake)


@pytest.fixture(scope="module")
def temporary():
    """A fake that takes temporary credentials: a session token must come with them."""
    fake = Fake("bedrock-sts", "--aws-credentials", f"{KEY}:{SECRET}:{TOKEN}")
    yield fake
    stop(fake)


def client(fake, key=KEY, secret=SECRET, token=None):
    return boto3.session.Session().client(
        "bedrock-runtime",
        endpoint_url=fake.root_url,
        region_name="us-east-1",
        aws_access_key_id=key,
        aws_secret_access_key=secret,
        aws_session_token=token,
        # One attempt: a retried refusal would take the next scripted behaviour.
        config=Config(retries={"total_max_attempts": 1}, connect_timeout=5, read_timeout=15),
    )


def error_of(raised):
    error = raised.value.response
    return error["Error"]["Code"], error["ResponseMetadata"]["HTTPStatusCode"], error["Error"]["Message"]


def test_converse_returns_the_fakes_text_signed_by_botocore(fake):
    fake.script({"content": "Sunny and mild in Paris"})
    answer = client(fake).converse(modelId=MODEL, messages=MESSAGES)
    assert answer["output"]["message"] == {
        "role": "assistant",
        "content": [{"text": "Sunny and mild in Paris"}],
    }
    assert answer["stopReason"] == "end_turn"
    usage = answer["usage"]
    assert usage["outputTokens"] == 5  # words
    assert usage["totalTokens"] == usage["inputTokens"] + usage["outputTokens"]
    received = fake.requests()[-1]
    # botocore encodes the model id's `:` once in the path and signs it encoded twice.
    assert received["path"] == "/model/us.anthropic.claude-3-5-haiku-20241022-v1%3A0/converse"
    authorization = received["headers"]["authorization"]
    assert authorization.startswith(f"AWS4-HMAC-SHA256 Credential={KEY}/")
    assert "/us-east-1/bedrock/aws4_request" in authorization
    assert json.loads(received["body"])["messages"] == MESSAGES


def test_converse_stream_yields_bedrocks_events_in_order(fake):
    fake.script({"content": "Sunny and mild in Paris", "chunks": 4})
    stream = client(fake).converse_stream(modelId=MODEL, messages=MESSAGES)
    assert stream["ResponseMetadata"]["HTTPHeaders"]["content-type"] == (
        "application/vnd.amazon.eventstream"
    )
    events = list(stream["stream"])
    kinds = [next(iter(event)) for event in events]
    assert kinds == [
        "messageStart",
        *["contentBlockDelta"] * 4,
        "contentBlockStop",
        "messageStop",
        "metadata",
    ]
    assert events[0]["messageStart"] == {"role": "assistant"}
    deltas = [event["contentBlockDelta"] for event in events[1:5]]
    assert "".join(delta["delta"]["text"] for delta in deltas) == "Sunny and mild in Paris"
    # The padding member `p` the fake adds, as Bedrock does, is no part of the model.
    assert all(set(delta) == {"contentBlockIndex", "delta"} for delta in deltas)
    assert events[6]["messageStop"]["stopReason"] == "end_turn"
    metadata = events[7]["metadata"]
    assert metadata["usage"]["outputTokens"] == 5
    assert metadata["usage"]["totalTokens"] == (
        metadata["usage"]["inputTokens"] + metadata["usage"]["outputTokens"]
    )
    assert "latencyMs" in metadata["metrics"]


def test_a_tool_call_comes_back_as_tool_use(fake):
    fake.script({"content": "Let me look.", "tool_calls": [WEATHER]})
    answer = client(fake).converse(modelId=MODEL, messages=MESSAGES)
    assert answer["stopReason"] == "tool_use"
    text, call = answer["output"]["message"]["content"]
    assert text == {"text": "Let me look."}
    assert call["toolUse"]["name"] == "get_weather"
    assert call["toolUse"]["input"] == WEATHER["arguments"]
    assert call["toolUse"]["toolUseId"].startswith("tooluse_")

    fake.script({"content": "Let me look.", "tool_calls": [WEATHER]})
    events = list(client(fake).converse_stream(modelId=MODEL, messages=MESSAGES)["stream"])
    start = next(e["contentBlockStart"] for e in events if "contentBlockStart" in e)
    assert start["contentBlockIndex"] == 1
    assert start["start"]["toolUse"]["name"] == "get_weather"
    pieces = [
        e["contentBlockDelta"]["delta"]["toolUse"]["input"]
        for e in events
        if "toolUse" in e.get("contentBlockDelta", {}).get("delta", {})
    ]
    assert len(pieces) > 1, "the input arrives in pieces"
    assert json.loads("".join(pieces)) == WEATHER["arguments"]
    assert events[-2]["messageStop"]["stopReason"] == "tool_use"


def test_an_error_mid_stream_is_the_scripted_exception(fake):
    fake.script({"chunks": 3, "error_after": 1, "error_message": "throttlingException: Slow down"})
    stream = client(fake).converse_stream(modelId=MODEL, messages=MESSAGES)["stream"]
    with pytest.raises(botocore.exceptions.EventStreamError) as raised:
        for _ in stream:
            pass
    assert raised.value.response["Error"] == {"Code": "throttlingException", "Message": "Slow down"}


def test_a_wrong_secret_is_refused_as_aws_refuses_it(fake):
    fake.script({})
    with pytest.raises(botocore.exceptions.ClientError) as raised:
        client(fake, secret=SECRET + "x").converse(modelId=MODEL, messages=MESSAGES)
    code, status, message = error_of(raised)
    assert (code, status) == ("InvalidSignatureException", 403)
    assert message.startswith("The request signature we calculated does not match")
    # Like AWS, the fake says what it signed: the model id's path segment, encoded twice.
    assert "v1%253A0/converse" in message


def test_an_unknown_key_is_unrecognized(fake):
    fake.script({})
    with pytest.raises(botocore.exceptions.ClientError) as raised:
        client(fake, key="AKIDSOMEONEELSE").converse(modelId=MODEL, messages=MESSAGES)
    code, status, message = error_of(raised)
    assert (code, status) == ("UnrecognizedClientException", 403)
    assert message == "The security token included in the request is invalid."


def test_a_scripted_429_raises_throttling(fake):
    fake.script({"status": 429})
    bedrock = client(fake)
    with pytest.raises(bedrock.exceptions.ThrottlingException) as raised:
        bedrock.converse(modelId=MODEL, messages=MESSAGES)
    assert raised.value.response["ResponseMetadata"]["HTTPStatusCode"] == 429


def test_temporary_credentials_need_their_session_token(temporary):
    temporary.script({"content": "Signed with a session"})
    answer = client(temporary, token=TOKEN).converse(modelId=MODEL, messages=MESSAGES)
    assert answer["output"]["message"]["content"] == [{"text": "Signed with a session"}]
    assert temporary.requests()[-1]["headers"]["x-amz-security-token"] == TOKEN
    with pytest.raises(botocore.exceptions.ClientError) as raised:
        client(temporary).converse(modelId=MODEL, messages=MESSAGES)
    assert error_of(raised)[:2] == ("UnrecognizedClientException", 403)
