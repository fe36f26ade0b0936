"""Runs an agent and reads its stream with the Python SSE client docs/agent-runtime.md shows
(`httpx` + `httpx-sse`), its loop as documented.

Usage: sse_run.py BASE_URL AGENT_ID API_KEY MESSAGE. stdout: what the documented loop prints,
then a `--- events` line, then each event as a JSON line (`id`, `event`, `data`).
"""

import json
import sys

import httpx
from httpx_sse import connect_sse

base, agent_id, api_key, message = sys.argv[1:5]
seen = []

# The documented example, unchanged but for `message` and recording what it reads.
with httpx.Client(timeout=None) as client:
    with connect_sse(client, "POST", f"{base}/agents/{agent_id}/run",
                     headers={"X-API-Key": api_key}, json={"message": message}) as source:
        for event in source.iter_sse():
            data = json.loads(event.data)
            seen.append({"id": event.id, "event": event.event, "data": data})
            if event.event == "message":
                print(data["delta"], end="", flush=True)
            elif event.event in ("done", "error"):
                print("\n", data)

print("--- events")
for event in seen:
    print(json.dumps(event))
