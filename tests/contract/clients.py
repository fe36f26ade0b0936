"""Each service driven through a client generated from its OpenAPI document (docs/openapi.md).

`infra/scripts/contract` generates the clients with openapi-python-client into target/contract/clients
(on PYTHONPATH), starts the `make dev` stack and runs this file: a document that generates a broken
client, or a client that cannot do the basic job, fails CI.

Environment: CONTRACT_BASE (backend and meeting data API), CONTRACT_RUNNER_BASE, CONTRACT_CREDENTIALS
(the stack's credentials file), CONTRACT_DOCUMENTS (openapi/, for the streams' event schemas).
"""

import json
import os
import unittest
import uuid

import builtins

import jsonschema

BASE = os.environ["CONTRACT_BASE"]
RUNNER_BASE = os.environ["CONTRACT_RUNNER_BASE"]
DOCUMENTS = os.environ["CONTRACT_DOCUMENTS"]
with open(os.environ["CONTRACT_CREDENTIALS"]) as file:
    CREDENTIALS = json.load(file)


def provide_unset(package):
    """openapi-python-client 0.29.1 annotates an operation whose body has two media types (JSON
    and multipart: the run routes) with `Unset` without importing it; the module then fails to
    import. The name is the client's own type, provided here until the generator imports it."""
    builtins.Unset = __import__(f"{package}.types", fromlist=["Unset"]).Unset


def platform_client(package, base):
    """A client of the backend or the runner, presenting the stack's key as `X-API-Key`."""
    client_type = __import__(package, fromlist=["AuthenticatedClient"]).AuthenticatedClient
    return client_type(
        base_url=base, token=CREDENTIALS["api_key"], prefix="", auth_header_name="X-API-Key",
        raise_on_unexpected_status=True, timeout=60,
    )


def parse_events(text):
    """The frames of a Server-Sent Events body as {event, id, data} (data parsed as JSON)."""
    events = []
    for frame in text.replace("\r\n", "\n").split("\n\n"):
        event, data = {}, []
        for line in frame.split("\n"):
            if not line or line.startswith(":"):
                continue
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "data":
                data.append(value)
            else:
                event[field] = value
        if data:
            event["data"] = json.loads("\n".join(data))
            events.append(event)
    return events


def check_stream(document, path, text):
    """Validates every event of `text` against the `x-itemSchema` of `POST path` in openapi/{document}.json."""
    with open(os.path.join(DOCUMENTS, f"{document}.json")) as file:
        document = json.load(file)
    item_schema = document["paths"][path]["post"]["responses"]["200"]["content"]["text/event-stream"]["x-itemSchema"]
    validator = jsonschema.Draft202012Validator({**item_schema, "components": document["components"]})
    events = parse_events(text)
    for event in events:
        validator.validate(event)
    return events


class MeetingDataApi(unittest.TestCase):
    def test_a_token_then_the_meeting_list_and_a_detail(self):
        from meeting_data_api_client import AuthenticatedClient, Client
        from meeting_data_api_client.api.authentication import obtain_access_token
        from meeting_data_api_client.api.meetings import get_meeting, list_meetings
        from meeting_data_api_client.models import TokenRequest, TokenResponse
        from meeting_data_api_client.models.token_request_grant_type import TokenRequestGrantType

        # Credentials in the form (the operation's `{}` security alternative: no Authorization
        # header; the generated signature asks for an AuthenticatedClient because HTTP Basic is
        # the other alternative).
        anonymous = self.enterContext(Client(base_url=BASE, raise_on_unexpected_status=True))
        body = TokenRequest(
            grant_type=TokenRequestGrantType.CLIENT_CREDENTIALS,
            client_id=CREDENTIALS["client_id"],
            client_secret=CREDENTIALS["client_secret"],
        )
        answer = obtain_access_token.sync_detailed(client=anonymous, body=body)
        self.assertEqual(answer.status_code, 200, answer.content)
        self.assertIsInstance(answer.parsed, TokenResponse)

        client = self.enterContext(
            AuthenticatedClient(base_url=BASE, token=answer.parsed.access_token, raise_on_unexpected_status=True)
        )
        page = list_meetings.sync(client=client, size=5)
        self.assertGreater(page.count, 0, "make dev imports the demo meetings")
        self.assertLessEqual(len(page.results), 5)
        detail = get_meeting.sync(page.results[0].id, client=client)
        self.assertEqual(detail.id, page.results[0].id)


class Backend(unittest.TestCase):
    def test_an_agent_created_then_run_with_its_stream_read(self):
        provide_unset("backend_client")
        from backend_client.api.agent_runs import run_agent
        from backend_client.api.agents import create_agent, get_agent
        from backend_client.models import AgentRunRequest, ConfigAgent

        client = self.enterContext(platform_client("backend_client", BASE))
        demo = get_agent.sync(uuid.UUID(CREDENTIALS["demo_agent_id"]), client=client)
        body = ConfigAgent.from_dict({
            "type": "config", "name": f"Generated client {uuid.uuid4()}", "framework": "chainlib",
            "language_model_id": demo.data.language_model_id,
        })
        created = create_agent.sync(client=client, body=body)
        agent_id = str(created.data.id)
        answer = run_agent.sync_detailed(uuid.UUID(agent_id), client=client, body=AgentRunRequest(message="Hello from a generated client"))
        self.assertEqual(answer.status_code, 200, answer.content)
        events = check_stream("backend", "/agents/{agent_id}/run", answer.content.decode())
        self.assertEqual(events[0]["event"], "metadata")
        self.assertEqual(events[-1]["event"], "done", events)
        self.assertEqual(events[0]["data"]["agent_id"], agent_id)


class Runner(unittest.TestCase):
    def test_an_execution_then_its_task_status(self):
        provide_unset("runner_client")
        from runner_client.api.execution import execute_agent_stream
        from runner_client.api.monitoring import get_task
        from runner_client.models import RunRequest

        client = self.enterContext(platform_client("runner_client", RUNNER_BASE))
        answer = execute_agent_stream.sync_detailed(
            client=client, body=RunRequest(agent_id=CREDENTIALS["demo_agent_id"], message="Hello from a generated client")
        )
        self.assertEqual(answer.status_code, 200, answer.content)
        events = check_stream("runner", "/execute/a2a/stream/agent", answer.content.decode())
        self.assertEqual(events[-1]["event"], "done", events)
        task_id = answer.headers["x-run-id"]
        self.assertEqual(events[0]["data"]["run_id"], task_id)
        task = get_task.sync(uuid.UUID(task_id), client=client)
        self.assertEqual((str(task.data.id), task.data.status.value), (task_id, "success"))


if __name__ == "__main__":
    unittest.main()
