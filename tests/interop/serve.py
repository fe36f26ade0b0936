"""Serves an ASGI app on a free loopback port for the interop tests.

`listen()` binds the socket first, so an app that names its own URL (an A2A card) can be built
with the port. `serve()` prints the port (one line on stdout) only once the socket is
listening, so the test that started this process can connect as soon as it has read it.
"""

import socket

import uvicorn


def listen() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    return sock


def serve(app, sock: socket.socket | None = None) -> None:
    sock = sock or listen()
    print(sock.getsockname()[1], flush=True)
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])
