"""Validates bodies against OpenAI's official schemas, one component at a time.

The schemas live in tests/openapi/schemas/, one file per component (see SOURCE.md there).
"""

import functools
import json
import pathlib

from jsonschema import Draft202012Validator

SCHEMAS = pathlib.Path(__file__).resolve().parents[1] / "openapi" / "schemas"


@functools.cache
def validator(component):
    schema = json.loads((SCHEMAS / f"{component}.json").read_text())
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def validate(component, body):
    """Raises AssertionError listing every way `body` breaks the component's schema."""
    errors = sorted(validator(component).iter_errors(body), key=lambda e: list(e.path))
    problems = [f"{'/'.join(map(str, e.path)) or '(root)'}: {e.message}" for e in errors]
    assert not problems, f"{component} schema violated:\n" + "\n".join(problems)


def sse_json(text):
    """The JSON data of every event of an SSE body, `[DONE]` left out."""
    events = []
    for event in text.split("\n\n"):
        for line in event.splitlines():
            if line.startswith("data: ") and line[6:].strip() != "[DONE]":
                events.append(json.loads(line[6:]))
    return events
