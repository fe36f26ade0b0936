"""An MCP server on the official MCP Python SDK (PyPI `mcp`), over Streamable HTTP at `/mcp`.

Tools: `forecast` answers text only; `conditions` answers structured content (the SDK derives
its output schema from the return type); `alerts` raises a `ToolError`, which the SDK reports
as an `isError` result with its message; `team` echoes the `x-team` request header. With
`--token T`, every HTTP request without `Authorization: Bearer T` is answered 401, as a server
behind a gateway would.
"""

import argparse
from importlib.metadata import version

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from serve import serve

server = MCPServer(name="python-interop-server", version=version("mcp"), instructions="Ask about the weather.")


@server.tool(description="Tomorrow's forecast for a city", structured_output=False)
def forecast(city: str) -> str:
    return f"Sunny in {city}"


@server.tool(description="Current conditions in a city")
def conditions(city: str) -> dict[str, str | int]:
    return {"city": city, "sky": "clear", "celsius": 21}


@server.tool(description="Weather alerts for a city")
def alerts(city: str) -> str:
    raise ToolError(f"alerts service down for {city}")


@server.tool(description="The team named by the caller's x-team header", structured_output=False)
def team(ctx: Context) -> str:
    return (ctx.headers or {}).get("x-team", "")


def require_bearer(app, token: str):
    """ASGI middleware: 401 for an HTTP request without the expected bearer token."""
    expected = f"Bearer {token}".encode()

    async def guarded(scope, receive, send):
        if scope["type"] == "http" and dict(scope["headers"]).get(b"authorization") != expected:
            await send({"type": "http.response.start", "status": 401, "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": b"missing credentials"})
            return
        await app(scope, receive, send)

    return guarded


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--token")
    args = parser.parse_args()
    app = server.streamable_http_app(streamable_http_path="/mcp")
    serve(require_bearer(app, args.token) if args.token else app)
