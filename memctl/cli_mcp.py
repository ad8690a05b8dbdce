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

    if http is not None and not 0 < http < 65536:
        raise InvalidInput(f"--http {http} is not a TCP port (1-65535)")
    with _manager() as mm:
        server = build_server(ScopedMemory(mm, ns))  # checks --ns before anything is served
        if http is None:
            server.run("stdio")
        else:
            server.run("streamable-http", host=host, port=http)


def register(app: typer.Typer) -> None:
    app.command("mcp")(mcp)


__all__ = ["register"]
