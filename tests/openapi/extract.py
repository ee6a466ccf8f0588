"""Extracts component schemas from OpenAI's OpenAPI description into tests/openapi/schemas/.

Each named component becomes one standalone JSON Schema (draft 2020-12) file, named after
the component, holding every component it refers to under `$defs`. Descriptions and examples
are left out: they validate nothing. The description is OpenAPI 3.1 but still marks some
fields with 3.0's `nullable: true`, which JSON Schema does not know; such a schema is
rewritten to also accept `null`, as OpenAPI defines it. To add a component (a Responses object, a stream event),
name it here and run, from the repository root, against openapi.json of the commit noted in
SOURCE.md:

    python3 tests/openapi/extract.py path/to/openapi.json ComponentName ...
"""

import json
import pathlib
import sys

OUT = pathlib.Path(__file__).resolve().parent / "schemas"
PREFIX = "#/components/schemas/"
DROPPED = {"description", "example", "examples", "title", "x-oaiMeta", "x-oaiExpandable"}


def nullable(node):
    """OpenAPI 3.0's `nullable: true` said in JSON Schema: `null` is valid too."""
    node = dict(node)
    del node["nullable"]
    kind = node.get("type")
    if isinstance(kind, str):
        node["type"] = [kind, "null"]
        if "enum" in node and None not in node["enum"]:
            node["enum"] = [*node["enum"], None]
        return node
    return {"anyOf": [node, {"type": "null"}]}


def strip(node, found):
    """The node without documentation, its component references rewritten to `$defs`."""
    if isinstance(node, dict) and node.get("nullable") is True:
        return strip(nullable(node), found)
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            if key in DROPPED and not isinstance(value, dict | list):
                continue
            if key == "$ref" and isinstance(value, str) and value.startswith(PREFIX):
                name = value[len(PREFIX):]
                found.add(name)
                out[key] = f"#/$defs/{name}"
            else:
                out[key] = strip(value, found)
        return out
    if isinstance(node, list):
        return [strip(item, found) for item in node]
    return node


def closure(components, name):
    """The component and every one it refers to, directly or not."""
    defs, todo = {}, [name]
    while todo:
        current = todo.pop()
        if current in defs:
            continue
        found = set()
        defs[current] = strip(components[current], found)
        todo.extend(found - defs.keys())
    return defs


def main():
    spec = json.loads(pathlib.Path(sys.argv[1]).read_text())
    components = spec["components"]["schemas"]
    OUT.mkdir(exist_ok=True)
    for name in sys.argv[2:]:
        defs = closure(components, name)
        schema = {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "$ref": f"#/$defs/{name}",
            "$defs": dict(sorted(defs.items())),
        }
        (OUT / f"{name}.json").write_text(json.dumps(schema, indent=1, sort_keys=False) + "\n")
        print(f"{name}: {len(defs)} components")


if __name__ == "__main__":
    main()
