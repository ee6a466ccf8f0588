"""The official openai SDK's `client.responses.compact()` through the gateway: a stored
conversation compacts into a `CompactedResponse`, and the next turn continues from its output
with the summary in place of the history, passed through or translated."""

import json

import pytest
from openai.types.responses import CompactedResponse, ResponseCompactionItem

SUMMARY = "SUMMARY: Ada goes to Oslo in May."


def upstream_of(fakes, route):
    return fakes["primary"] if route == "smart" else fakes["kinds"]["anthropic"]


# The SDK types `output` as output items, which have no user message: it warns as it
# serialises the window's user messages back, and sends them as they came.
@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings")
@pytest.mark.parametrize("route", ["smart", "via-anthropic"])
def test_a_conversation_compacts_and_continues(openai_client, fakes, route):
    upstream = upstream_of(fakes, route)
    upstream.script(
        {"content": "Hello Ada."},
        {"content": "Oslo is lovely in May."},
        {"content": SUMMARY},
        {"content": "You go to Oslo."},
    )
    first = openai_client.responses.create(model=route, input="I am Ada.")
    second = openai_client.responses.create(
        model=route, input="I go to Oslo in May.", previous_response_id=first.id
    )

    compacted = openai_client.responses.compact(model=route, previous_response_id=second.id)
    assert isinstance(compacted, CompactedResponse)
    assert compacted.object == "response.compaction"
    assert [item.type for item in compacted.output] == ["message", "message", "compaction"]
    item = compacted.output[-1]
    assert isinstance(item, ResponseCompactionItem)
    assert item.encrypted_content and SUMMARY not in item.encrypted_content
    assert compacted.usage.total_tokens > 0
    assert compacted.created_at > 0

    # The compacted window, as it came, then the next user message.
    following = openai_client.responses.create(
        model=route, input=[*compacted.output, {"role": "user", "content": "Where do I go?"}]
    )
    assert following.output_text == "You go to Oslo."
    sent = json.dumps(json.loads(upstream.requests()[-1]["body"]))
    assert "Ada goes to Oslo in May." in sent
    assert "Where do I go?" in sent
    assert "Hello Ada." not in sent and "Oslo is lovely" not in sent
