"""Sends Chat Completions requests and reads their streams with OpenAI's official Python client
(PyPI `openai`).

stdin: {"base_url": "...", "requests": [body, ...]}, each body a request our provider sent.
Each body is checked against the client's own request type (`CompletionCreateParamsStreaming`,
validated with pydantic), then sent as is with `client.chat.completions.create(**body)`, so a
parameter the client does not know fails too. Each answer is read as the client exposes it:
the content deltas in order, every chunk checked against `ChatCompletionChunk`, and the
client's `ChatCompletionStreamState` accumulating the final text, tool calls and usage.

stdout: a JSON list with one entry per request.
"""

import json
import sys

import openai
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletionChunk
from openai.types.chat.completion_create_params import CompletionCreateParamsStreaming
from pydantic import TypeAdapter, ValidationError

REQUEST = TypeAdapter(CompletionCreateParamsStreaming)


def materialize(value):
    """Validated `Iterable` fields are lazy: walking them runs their validation."""
    if isinstance(value, dict):
        return {key: materialize(item) for key, item in value.items()}
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        return value
    return [materialize(item) for item in value]


def request_errors(body) -> list[str]:
    try:
        materialize(REQUEST.validate_python(body))
    except ValidationError as error:
        return [f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors()]
    return []


def chunk_errors(chunk: ChatCompletionChunk) -> list[str]:
    # The client builds chunks without validating them; the fields the server sent, checked.
    try:
        ChatCompletionChunk.model_validate(chunk.model_dump(exclude_unset=True))
    except ValidationError as error:
        return [f"chunk {chunk.id}: {'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors()]
    return []


def read(client: openai.OpenAI, body: dict) -> dict:
    errors = request_errors(body)
    deltas, finish_reasons, bad_chunks = [], [], []
    state = ChatCompletionStreamState()
    for chunk in client.chat.completions.create(**body):
        bad_chunks += chunk_errors(chunk)
        state.handle_chunk(chunk)
        for choice in chunk.choices:
            if choice.delta.content:
                deltas.append(choice.delta.content)
            if choice.finish_reason:
                finish_reasons.append(choice.finish_reason)
    final = state.get_final_completion()
    message = final.choices[0].message
    usage = final.usage
    return {
        "request_errors": errors,
        "chunk_errors": bad_chunks,
        "deltas": deltas,
        "finish_reasons": finish_reasons,
        "text": message.content or "",
        "tool_calls": [
            {"id": call.id, "name": call.function.name, "arguments": json.loads(call.function.arguments or "{}")}
            for call in message.tool_calls or []
        ],
        "usage": None if usage is None else {"input_tokens": usage.prompt_tokens, "output_tokens": usage.completion_tokens},
    }


def main() -> None:
    job = json.load(sys.stdin)
    client = openai.OpenAI(base_url=job["base_url"], api_key="sk-interop", max_retries=0)
    print(json.dumps([read(client, body) for body in job["requests"]]))


if __name__ == "__main__":
    main()
