"""``memctl mcp``: serve the store to MCP clients (stdio by default, ``--http PORT`` for streamable HTTP).

See :mod:`memctl.mcp_server` for the tools. The SDK is imported only when the command runs.
"""

from __future__ import annotations

from typing import Annotated

import typer

from memctl.cli_common import _errors, _manager
from memory.errors import InvalidInput


@_errors
def mcp(
    ns: Annotated[list[str], typer.Option("--ns", help="Namespace prefix the client may use (repeatable)")],
    http: Annotated[int | None, typer.Option("--http", help="Serve streamable HTTP on this port (default: stdio)")]
    = None,
    host: Annotated[str, typer.Option(help="Interface for --http")] = "127.0.0.1",
) -> None:
    """MCP server: search (compact) → timeline → get, save, forget; confined to the --ns namespaces."""
    from memctl.mcp_server import ScopedMemory, build_server
    from memory.namespace import parse_namespace

    for n in ns:  # bad scopes are refused before the store is opened (or created)
        parse_namespace(n)
    if http is not None and not 0 < http < 65536:
        raise InvalidInput(f"--http {http} is not a TCP port (1-65535)")
    if http is not None:
        _check_listen(host, http)
    with _manager() as mm:
        server = build_server(ScopedMemory(mm, ns))  # checks --ns before anything is served
        if http is None:
            server.run("stdio")
        else:
            server.run("streamable-http", host=host, port=http)


def _check_listen(host: str, port: int) -> None:
    """Fail with our own error before the store opens, not with a server log line after it."""
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror:
        raise InvalidInput(f"--host {host!r} is not an address of this machine; use 127.0.0.1 or 0.0.0.0") from None
    family, _, _, _, addr = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server binds; TIME_WAIT is no obstacle
        try:
            s.bind(addr)
        except OSError as exc:
            raise InvalidInput(f"cannot listen on {host}:{port} ({exc.strerror}); "
                               "choose another --http port or --host") from None


def register(app: typer.Typer) -> None:
    app.command("mcp")(mcp)


__all__ = ["register"]
