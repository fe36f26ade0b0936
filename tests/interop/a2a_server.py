"""A remote agent on the official A2A Python SDK (PyPI `a2a-sdk`): its card at
`/.well-known/agent-card.json`, JSON-RPC at `/a2a`.

The executor answers with a task: a `working` status, then "You said: " and the user's text as
two chunks of one artifact, then `completed`. A message containing "fail" ends the task
`failed` with the reason "quota exceeded" instead.

`--protocol 1.0` (the SDK's default) publishes a card with one A2A 1.0 JSON-RPC interface.
`--protocol 0.3` publishes an A2A 0.3 interface and turns on the SDK's 0.3 compatibility layer,
as a server kept for older clients does. `--no-streaming` says the agent does not stream.
"""

import argparse

from a2a.helpers import new_task_from_user_message, new_text_artifact_update_event, new_text_status_update_event
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill, TaskState
from serve import listen, serve
from starlette.applications import Starlette


class EchoExecutor(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = context.current_task or new_task_from_user_message(context.message)
        await event_queue.enqueue_event(task)
        ids = {"task_id": task.id, "context_id": task.context_id}
        await event_queue.enqueue_event(
            new_text_status_update_event(**ids, state=TaskState.TASK_STATE_WORKING, text="Thinking.")
        )
        text = context.get_user_input()
        if "fail" in text:
            await event_queue.enqueue_event(
                new_text_status_update_event(**ids, state=TaskState.TASK_STATE_FAILED, text="quota exceeded")
            )
            return
        for i, chunk in enumerate(["You said: ", text]):
            await event_queue.enqueue_event(
                new_text_artifact_update_event(
                    **ids, name="answer", artifact_id="answer", text=chunk, append=i > 0, last_chunk=i == 1
                )
            )
        await event_queue.enqueue_event(
            new_text_status_update_event(**ids, state=TaskState.TASK_STATE_COMPLETED, text="")
        )

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        raise NotImplementedError


def app(port: int, protocol: str, streaming: bool) -> Starlette:
    url = f"http://127.0.0.1:{port}/a2a"
    card = AgentCard(
        name="Python echo agent",
        description="Repeats what it is told.",
        version="1.0.0",
        capabilities=AgentCapabilities(streaming=streaming),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="echo", name="Echo", description="Repeats the message.", tags=["echo"])],
        supported_interfaces=[AgentInterface(protocol_binding="JSONRPC", protocol_version=protocol, url=url)],
    )
    handler = DefaultRequestHandler(agent_executor=EchoExecutor(), task_store=InMemoryTaskStore(), agent_card=card)
    routes = create_agent_card_routes(card) + create_jsonrpc_routes(
        handler, rpc_url="/a2a", enable_v0_3_compat=protocol == "0.3"
    )
    return Starlette(routes=routes)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--protocol", choices=["1.0", "0.3"], default="1.0")
    parser.add_argument("--no-streaming", action="store_true")
    args = parser.parse_args()
    sock = listen()
    serve(app(sock.getsockname()[1], args.protocol, not args.no_streaming), sock)
