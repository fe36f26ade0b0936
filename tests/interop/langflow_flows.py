"""Creates the interop test's flows on a real Langflow through its own API; prints their ids as JSON.

    python langflow_flows.py BASE_URL API_KEY PREFIX
    -> {"chat": "...", "tokens": "...", "failing": "...", "text": "..."}

The flows are named "PREFIX chat" and so on: each test names its own, as sync names agents after
flows and every test's sync sees every flow on the server.

The built-in components' templates come from GET /api/v1/all and the custom components' from
POST /api/v1/custom_component, so the flows are exactly what Langflow's editor would save.
Standard library only: it runs with any Python 3.
"""

import json
import sys
import urllib.request

# Yields its answer in chunks: Langflow streams a Message whose text is an iterator as `token`
# events (Component._stream_message reads each chunk's `.content`).
TOKENS_CODE = '''
from lfx.custom.custom_component.component import Component
from lfx.io import MessageTextInput, Output
from lfx.schema.message import Message


class Chunk:
    def __init__(self, content):
        self.content = content


class ChunkedEcho(Component):
    display_name = "Chunked Echo"
    name = "ChunkedEcho"
    inputs = [MessageTextInput(name="input_value", display_name="Input")]
    outputs = [Output(display_name="Message", name="message", method="build_message")]

    def build_message(self) -> Message:
        words = ["You ", "said: ", str(self.input_value)]
        return Message(text=iter(Chunk(word) for word in words))
'''

# Raises, so the run fails with this component's reason.
FAILING_CODE = '''
from lfx.custom.custom_component.component import Component
from lfx.io import MessageTextInput, Output
from lfx.schema.message import Message


class AlwaysFails(Component):
    display_name = "Always Fails"
    name = "AlwaysFails"
    inputs = [MessageTextInput(name="input_value", display_name="Input")]
    outputs = [Output(display_name="Message", name="message", method="build_message")]

    def build_message(self) -> Message:
        raise ValueError("the quota of widgets is exhausted")
'''


def call(base_url, api_key, method, path, body=None):
    request = urllib.request.Request(
        base_url.rstrip("/") + path,
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"x-api-key": api_key, "content-type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.load(response)


def node(node_id, component):
    return {
        "id": node_id,
        "type": "genericNode",
        "position": {"x": 0, "y": 0},
        "data": {"id": node_id, "type": component["name"], "node": component["template_node"]},
    }


def edge(source, source_output, target, target_field):
    """An edge as the editor saves it: the handles as objects in `data`, as strings outside."""
    output = next(o for o in source["data"]["node"]["outputs"] if o["name"] == source_output)
    field = target["data"]["node"]["template"][target_field]
    source_handle = {
        "dataType": source["data"]["type"],
        "id": source["id"],
        "name": source_output,
        "output_types": output["types"],
    }
    target_handle = {
        "fieldName": target_field,
        "id": target["id"],
        "inputTypes": field.get("input_types"),
        "type": field["type"],
    }
    return {
        "id": f"{source['id']}-{target['id']}",
        "source": source["id"],
        "target": target["id"],
        "sourceHandle": json.dumps(source_handle),
        "targetHandle": json.dumps(target_handle),
        "data": {"sourceHandle": source_handle, "targetHandle": target_handle},
    }


def main():
    base_url, api_key, prefix = sys.argv[1], sys.argv[2], sys.argv[3]
    catalog = call(base_url, api_key, "GET", "/api/v1/all")
    builtin = {name: dict(template, name=name) for group in catalog.values() if isinstance(group, dict)
               for name, template in group.items() if isinstance(template, dict)}

    def component(name):
        return {"name": name, "template_node": builtin[name]}

    def custom(code):
        built = call(base_url, api_key, "POST", "/api/v1/custom_component", {"code": code})
        return {"name": built["type"], "template_node": built["data"]}

    def pipeline(*stages):
        """Nodes in a line, each stage's first output into the next one's `input_value`."""
        nodes = [node(f"{stage['name']}-{i}", stage) for i, stage in enumerate(stages)]
        edges = [edge(a, a["data"]["node"]["outputs"][0]["name"], b, "input_value") for a, b in zip(nodes, nodes[1:])]
        return {"nodes": nodes, "edges": edges}

    flows = {
        "chat": (f"{prefix} chat", pipeline(component("ChatInput"), component("ChatOutput"))),
        "tokens": (f"{prefix} tokens", pipeline(component("ChatInput"), custom(TOKENS_CODE), component("ChatOutput"))),
        "failing": (f"{prefix} failing", pipeline(component("ChatInput"), custom(FAILING_CODE), component("ChatOutput"))),
        "text": (f"{prefix} text", pipeline(component("TextInput"), component("TextOutput"))),
    }
    ids = {}
    for key, (name, data) in flows.items():
        created = call(base_url, api_key, "POST", "/api/v1/flows/", {"name": name, "description": key, "data": data})
        ids[key] = created["id"]
    print(json.dumps(ids))


if __name__ == "__main__":
    main()
