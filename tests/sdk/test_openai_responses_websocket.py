"""The official openai SDK's Responses WebSocket mode (`client.responses.connect()`, from
`openai[realtime]`) through the gateway: each `response.create` on the socket runs the
route's chain as `POST /v1/responses` would, and its events come back as frames."""

import json

import pytest


def events_of_one_turn(connection):
    """Every event of one response, up to its terminal one."""
    events = []
    for event in connection:
        events.append(event)
        if event.type in ("response.completed", "response.incomplete", "response.failed", "error"):
            return events
    raise AssertionError(f"the socket closed mid-turn after {events}")


def text_of(events):
    return "".join(e.delta for e in events if e.type == "response.output_text.delta")


@pytest.mark.parametrize("route", ["smart", "via-openai", "via-anthropic"])
def test_a_plain_response(openai_client, fakes, route):
    for fake in (fakes["primary"], *fakes["kinds"].values()):
        fake.script({"content": "Hello over the socket", "chunks": 3})
    with openai_client.responses.connect() as connection:
        connection.response.create(model=route, input="Hello", instructions="Be brief.")
        events = events_of_one_turn(connection)
    assert events[0].type == "response.created"
    assert text_of(events) == "Hello over the socket"
    completed = events[-1]
    assert completed.type == "response.completed"
    assert completed.response.output_text == "Hello over the socket"
    assert completed.response.status == "completed"


@pytest.mark.parametrize("route", ["smart", "via-openai", "via-anthropic"])
def test_a_streamed_tool_call(openai_client, fakes, route):
    call = {"name": "get_weather", "arguments": {"city": "Oslo"}}
    for fake in (fakes["primary"], *fakes["kinds"].values()):
        fake.script({"content": "", "tool_calls": [call]})
    tools = [{
        "type": "function", "name": "get_weather", "description": "Weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]},
    }]
    with openai_client.responses.connect() as connection:
        connection.response.create(model=route, input="Weather in Oslo?", tools=tools)
        events = events_of_one_turn(connection)
    arguments = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    assert json.loads(arguments) == {"city": "Oslo"}
    calls = [item for item in events[-1].response.output if item.type == "function_call"]
    assert [c.name for c in calls] == ["get_weather"]
    assert json.loads(calls[0].arguments) == {"city": "Oslo"}


def test_previous_response_id_across_two_messages_on_one_socket(openai_client, fakes):
    fake = fakes["kinds"]["openai"]
    fake.script({"content": "Noted, Ada."}, {"content": "You are Ada."})
    with openai_client.responses.connect() as connection:
        connection.response.create(model="via-openai", input="My name is Ada.", store=False)
        first = events_of_one_turn(connection)[-1].response
        connection.response.create(
            model="via-openai", input="What is my name?", previous_response_id=first.id, store=False
        )
        second = events_of_one_turn(connection)[-1].response
    assert second.output_text == "You are Ada."
    assert second.previous_response_id == first.id
    # The second turn went upstream with the whole conversation.
    sent = json.loads(fake.requests()[-1]["body"])
    said = json.dumps(sent["messages"])
    for part in ("My name is Ada.", "Noted, Ada.", "What is my name?"):
        assert part in said


def test_two_stream_ids_at_once(openai_client, fakes):
    fakes["kinds"]["openai"].script({"content": "lane answer", "chunks": 4}, {"content": "lane answer", "chunks": 4})
    with openai_client.responses.connect() as connection:
        connection.response.create(model="via-openai", input="one", stream_id="a")
        connection.response.create(model="via-openai", input="two", stream_id="b")
        completed, texts = {}, {"a": "", "b": ""}
        for event in connection:
            lane = event.stream_id
            assert lane in ("a", "b"), event
            if event.type == "response.output_text.delta":
                texts[lane] += event.delta
            if event.type == "response.completed":
                completed[lane] = event.response
                if len(completed) == 2:
                    break
    assert texts == {"a": "lane answer", "b": "lane answer"}
    assert completed["a"].id != completed["b"].id


def test_a_failover_before_the_first_event(openai_client, fakes):
    fakes["primary"].script({"status": 503})
    fakes["secondary"].script({"content": "from the fallback"})
    with openai_client.responses.connect() as connection:
        connection.response.create(model="smart", input="Hello")
        events = events_of_one_turn(connection)
    assert [e for e in events if e.type == "error"] == []
    assert events[-1].type == "response.completed"
    assert events[-1].response.output_text == "from the fallback"


def test_a_refused_turn_is_an_error_event_on_an_open_socket(openai_client, fakes):
    fakes["kinds"]["openai"].script({"content": "still here"})
    with openai_client.responses.connect() as connection:
        connection.response.create(model="no-such-route", input="Hello")
        refused = events_of_one_turn(connection)
        connection.response.create(model="via-openai", input="Hello")
        served = events_of_one_turn(connection)
    assert refused[-1].type == "error"
    assert refused[-1].status == 404
    assert served[-1].response.output_text == "still here"


def test_a_second_key_cannot_read_the_first_keys_state(stack, tmp_path):
    """A gateway of its own with auth required, two virtual keys made with the CLI."""
    import re
    import subprocess

    from openai import NotFoundError, OpenAI

    from conftest import BIN, free_port, start

    fake = stack["kinds"]["openai"]
    fake.script({"content": "kept for ana"})
    port = free_port()
    config = tmp_path / "switchyard.toml"
    config.write_text(
        f'[server]\nlisten = "127.0.0.1:{port}"\n[auth]\nrequired = true\n'
        f'[store]\nurl = "sqlite://{tmp_path}/store.db"\n'
        f'[[providers]]\nname = "up"\nkind = "openai"\nbase_url = "{fake.base_url}"\n'
        f'key_required = false\n[[routes]]\nname = "r"\nsteps = [{{ provider = "up", model = "m" }}]\n'
    )

    def issue(user):
        made = subprocess.run(
            [BIN, "vkeys", "create", "--config", str(config), "--user", user, "--role", "default"],
            capture_output=True, text=True, check=True,
        )
        return re.search(r"sy-\S+", made.stdout).group(0)

    ana, bo = issue("ana"), issue("bo")
    gateway = start(["serve", "--config", str(config)], "switchyard listening", "stderr")
    try:
        url = f"http://127.0.0.1:{port}/v1"
        owner = OpenAI(base_url=url, api_key=ana, timeout=15, max_retries=0)
        other = OpenAI(base_url=url, api_key=bo, timeout=15, max_retries=0)
        with owner.responses.connect() as connection:
            connection.response.create(model="r", input="a secret plan")
            first = events_of_one_turn(connection)[-1].response
        assert first.output_text == "kept for ana"
        with other.responses.connect() as connection:
            connection.response.create(model="r", input="go on", previous_response_id=first.id)
            refused = events_of_one_turn(connection)[-1]
        assert refused.type == "error"
        assert refused.error.code == "previous_response_not_found"
        with pytest.raises(NotFoundError):
            other.responses.retrieve(first.id)
        assert owner.responses.retrieve(first.id).output_text == "kept for ana"
    finally:
        gateway.terminate()
        gateway.wait(timeout=10)
