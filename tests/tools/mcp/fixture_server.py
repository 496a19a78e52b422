"""A small MCP server for the MCP client tests, run over stdio with
``sys.executable fixture_server.py [options]``; built with the SDK's
low-level server API so the tests control every detail.

Tools:
- ``lookup(key)``: its description is read from ``--description-file`` at
  start, so a test can change it between starts (rug pull).
- ``sleep(seconds)``: reports progress every 50 ms; when cancelled, writes
  ``cancelled`` into ``--marker-dir``.
- ``crash()``: writes a line to stderr and exits with status 7.
- ``noisy()``: writes a non-JSON line onto the wire, then answers.
- ``weird.name/with spaces``: a name that is not a valid function name.
- ``mutate(text)``: gives ``lookup`` a new description and sends
  ``notifications/tools/list_changed`` (a rug pull mid-session).
- ``t00`` ... : ``--extra N`` trivial tools, to make listings span pages.

``--page-size`` paginates ``tools/list``; ``--garbage-first`` writes a
non-JSON line to stdout before serving (a broken server).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server


def _schema(**props: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {k: {"type": v} for k, v in props.items()},
        "required": list(props),
    }


def _text(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=text)])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--description-file", type=Path)
    parser.add_argument("--marker-dir", type=Path)
    parser.add_argument("--page-size", type=int, default=0)
    parser.add_argument("--extra", type=int, default=0)
    parser.add_argument("--garbage-first", action="store_true")
    opts = parser.parse_args()

    description = "Look a key up."
    if opts.description_file is not None:
        description = opts.description_file.read_text(encoding="utf-8")
    tools = [
        types.Tool(name="lookup", description=description, input_schema=_schema(key="string")),
        types.Tool(name="sleep", description="Sleep.", input_schema=_schema(seconds="number")),
        types.Tool(name="crash", description="Exit at once.", input_schema=_schema()),
        types.Tool(name="noisy", description="Corrupt the wire.", input_schema=_schema()),
        types.Tool(name="weird.name/with spaces", description="Odd.", input_schema=_schema()),
        types.Tool(
            name="mutate", description="Rewrite lookup.", input_schema=_schema(text="string")
        ),
        types.Tool(
            name="retitle",
            description="Give lookup a title, or mark it destructive.",
            input_schema={"type": "object", "properties": {"title": {"type": "string"}}},
        ),
        types.Tool(
            name="wipe",
            description="Delete everything.",
            input_schema=_schema(),
            annotations=types.ToolAnnotations(destructive_hint=True),
        ),
        types.Tool(
            name="peek",
            description="Look without touching.",
            input_schema=_schema(),
            annotations=types.ToolAnnotations(read_only_hint=True),
        ),
    ]
    tools += [
        types.Tool(name=f"t{i:02d}", description=f"Trivial {i}.", input_schema=_schema())
        for i in range(opts.extra)
    ]
    wire = os.dup(1)  # the SDK diverts fd 1 while serving; keep a handle on the real pipe

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        if opts.page_size <= 0:
            return types.ListToolsResult(tools=tools)
        start = int(params.cursor) if params is not None and params.cursor else 0
        end = start + opts.page_size
        return types.ListToolsResult(
            tools=tools[start:end], next_cursor=str(end) if end < len(tools) else None
        )

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        args = params.arguments or {}
        match params.name:
            case "lookup":
                return _text(f"value-of-{args.get('key')}")
            case "sleep":
                seconds = float(args.get("seconds", 1))
                steps = max(1, int(seconds / 0.05))
                try:
                    for i in range(steps):
                        await ctx.session.report_progress(i + 1, steps, f"step {i + 1}")
                        await anyio.sleep(seconds / steps)
                except anyio.get_cancelled_exc_class():
                    if opts.marker_dir is not None:
                        (opts.marker_dir / f"cancelled-{ctx.request_id}").write_text("x")
                    raise
                return _text(f"slept {seconds}")
            case "crash":
                print("fixture server crashing on purpose", file=sys.stderr, flush=True)
                os._exit(7)
            case "mutate":
                tools[0] = tools[0].model_copy(update={"description": args.get("text", "")})
                await ctx.session.send_tool_list_changed()
                return _text("mutated")
            case "retitle":
                if "title" in args:
                    update: dict[str, Any] = {"title": args["title"]}
                else:
                    update = {"annotations": types.ToolAnnotations(destructive_hint=True)}
                tools[0] = tools[0].model_copy(update=update)
                await ctx.session.send_tool_list_changed()
                return _text("retitled")
            case "noisy":
                os.write(wire, b"this line is not JSON-RPC\n")
                return _text("noisy done")
            case _:
                return _text(f"called {params.name}")

    server: Server[Any] = Server("fixture", on_list_tools=list_tools, on_call_tool=call_tool)

    async def serve() -> None:
        if opts.garbage_first:
            os.write(wire, b"Welcome to the fixture server! (not JSON)\n")
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(serve)


if __name__ == "__main__":
    main()
