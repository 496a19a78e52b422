"""``ToolServer``: agentrt tools, resources and prompts as an MCP server (an
official-SDK low-level ``Server``), with per-connection state (log level,
subscriptions).

Transport-agnostic: ``transports`` runs it in-process, over stdio or over
streamable HTTP.  Never imports agents or aggregators.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import asynccontextmanager
from typing import Any, Final, final

import anyio
import mcp_types as mcp
from mcp.server import Server, ServerRequestContext
from mcp.server.models import InitializationOptions
from mcp.server.session import ServerSession
from mcp.shared.exceptions import MCPError
from mcp.shared.tool_name_validation import validate_tool_name
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS
from starlette.requests import Request

from agentrt._version import __version__
from agentrt.runtime.kernel._errors import ConfigError, ToolError
from agentrt.runtime.observe._log import get_logger
from agentrt.tools._tool import Tool, ToolContext
from agentrt.tools.hosting._calls import McpCallPeer
from agentrt.tools.hosting._hosted_catalog import Prompt, ResourceTemplate, StaticResource, complete
from agentrt.tools.hosting._hosted_content import (
    call_result,
    content_block,
    error_result,
    resource_contents,
)
from agentrt.tools.hosting._hosting_config import LogLevel, ToolServerConfig

log = get_logger(__name__)

#: JSON-RPC error code MCP assigns to "resource not found".
RESOURCE_NOT_FOUND: Final = -32002

#: Clients remembered per lifespan (LRU); bounds memory when HTTP sessions
#: come and go without the server hearing about it.
_MAX_CLIENTS: Final = 10_000

_SESSION_HEADER: Final = "mcp-session-id"

Ctx = ServerRequestContext["_ClientBook", Any]


@final
class _ClientState:
    """What the server remembers about one client connection."""

    __slots__ = ("log_floor", "session", "subscriptions")

    def __init__(self, log_floor: LogLevel) -> None:
        self.log_floor: LogLevel = log_floor
        self.subscriptions: set[str] = set()
        # The latest session object seen for this client: its standalone
        # channel carries resource-update notifications after the request ends.
        self.session: ServerSession | None = None


@final
class _ClientBook:
    """Client states of one lifespan, keyed by HTTP session id ("" when the
    transport has one connection per lifespan)."""

    def __init__(self, default_floor: LogLevel) -> None:
        self._default_floor: LogLevel = default_floor
        self._states: OrderedDict[str, _ClientState] = OrderedDict()

    def state(self, ctx: Ctx) -> _ClientState:
        key = ""
        if isinstance(ctx.request, Request):
            key = ctx.request.headers.get(_SESSION_HEADER, "")
        state = self._states.get(key)
        if state is None:
            state = self._states[key] = _ClientState(self._default_floor)
            if len(self._states) > _MAX_CLIENTS:
                self._states.popitem(last=False)
        else:
            self._states.move_to_end(key)
        return state

    def __iter__(self) -> Iterator[_ClientState]:
        return iter(list(self._states.values()))


@final
class ToolServer:
    """An MCP server hosting agentrt tools, resources and prompts.

    Build it, then run it with ``agentrt.tools.hosting._transports``.  Items
    may be added while it serves; clients see them on their next listing.
    A tool call runs with a ``ToolContext`` whose ``notify`` sends log and
    progress notifications and whose ``peer`` asks the client for sampling
    or elicitation.  An error output, ``ToolError``, any other exception or
    overrunning ``call_timeout_s`` becomes an ``isError`` result naming the
    tool and why; the server keeps serving.
    """

    def __init__(
        self,
        name: str,
        *,
        tools: Iterable[Tool] = (),
        resources: Iterable[StaticResource] = (),
        resource_templates: Iterable[ResourceTemplate] = (),
        prompts: Iterable[Prompt] = (),
        instructions: str | None = None,
        version: str = __version__,
        config: ToolServerConfig | None = None,
    ) -> None:
        self.name = name
        self.config = config or ToolServerConfig()
        self._tools: dict[str, Tool] = {}
        self._resources: dict[str, StaticResource] = {}
        self._templates: dict[str, ResourceTemplate] = {}
        self._prompts: dict[str, Prompt] = {}
        self._books: set[_ClientBook] = set()
        for tool in tools:
            self.add_tool(tool)
        for resource in resources:
            self.add_resource(resource)
        for template in resource_templates:
            self.add_resource_template(template)
        for prompt in prompts:
            self.add_prompt(prompt)
        self.lowlevel: Server[_ClientBook] = self._build(version, instructions)

    def __repr__(self) -> str:
        return (
            f"ToolServer({self.name!r}, tools={len(self._tools)}, "
            f"resources={len(self._resources) + len(self._templates)}, "
            f"prompts={len(self._prompts)})"
        )

    # -- registration --------------------------------------------------------

    def add_tool(self, tool: Tool) -> None:
        """Host ``tool`` under its spec's name (unique, SEP-986 characters)."""
        name = tool.spec.name
        check = validate_tool_name(name)
        if not check.is_valid:
            raise ConfigError(f"tool name {name!r}: {'; '.join(check.warnings)}", where=self.name)
        self._unique(name, self._tools, "tool")
        self._tools[name] = tool

    def add_resource(self, resource: StaticResource) -> None:
        """Serve ``resource`` at its URI."""
        self._unique(resource.uri, self._resources, "resource")
        self._resources[resource.uri] = resource

    def add_resource_template(self, template: ResourceTemplate) -> None:
        """Serve every URI ``template`` matches."""
        self._unique(template.uri_template, self._templates, "resource template")
        self._templates[template.uri_template] = template

    def add_prompt(self, prompt: Prompt) -> None:
        """Offer ``prompt``."""
        self._unique(prompt.name, self._prompts, "prompt")
        self._prompts[prompt.name] = prompt

    def _unique(self, key: str, table: dict[str, Any], what: str) -> None:
        if key in table:
            raise ConfigError(f"{what} {key!r} is already hosted", where=self.name)

    @property
    def tool_names(self) -> list[str]:
        """Names of the hosted tools, in registration order."""
        return list(self._tools)

    def initialization_options(self) -> InitializationOptions:
        """What the server announces in the ``initialize`` handshake."""
        return self.lowlevel.create_initialization_options()

    async def notify_resource_updated(self, uri: str) -> int:
        """Tell every client subscribed to ``uri`` that it changed; returns
        how many were told.  Clients that have gone are forgotten."""
        told = 0
        for book in list(self._books):
            for state in book:
                if uri not in state.subscriptions or state.session is None:
                    continue
                try:
                    await state.session.send_resource_updated(uri)
                    told += 1
                except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                    state.subscriptions.clear()
                    state.session = None
        return told

    # -- the low-level server --------------------------------------------------

    def _build(self, version: str, instructions: str | None) -> Server[_ClientBook]:
        server: Server[_ClientBook] = Server(
            self.name,
            version=version,
            instructions=instructions,
            lifespan=self._lifespan,
            get_tool_input_schema=self._input_schema,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_list_resources=self._list_resources,
            on_list_resource_templates=self._list_templates,
            on_read_resource=self._read_resource,
            on_subscribe_resource=self._subscribe,
            on_unsubscribe_resource=self._unsubscribe,
            on_list_prompts=self._list_prompts,
            on_get_prompt=self._get_prompt,
            on_completion=self._complete,
        )
        # Registered directly: the constructor keyword warns that logging is
        # deprecated in the 2026-07-28 protocol, but handshake-era clients
        # (every one shipping today) still send logging/setLevel.
        server.add_request_handler("logging/setLevel", mcp.SetLevelRequestParams, self._set_level)
        return server

    @asynccontextmanager
    async def _lifespan(self, _server: Server[_ClientBook]) -> AsyncIterator[_ClientBook]:
        book = _ClientBook(self.config.default_log_level)
        self._books.add(book)
        try:
            yield book
        finally:
            self._books.discard(book)

    def _input_schema(self, name: str) -> dict[str, Any] | None:
        tool = self._tools.get(name)
        return None if tool is None else tool.spec.parameters

    # -- tools -------------------------------------------------------------------

    async def _list_tools(
        self, ctx: Ctx, params: mcp.PaginatedRequestParams | None
    ) -> mcp.ListToolsResult:
        return mcp.ListToolsResult(
            tools=[
                mcp.Tool(
                    name=t.spec.name,
                    description=t.spec.description or t.spec.name,
                    input_schema=t.spec.parameters,
                )
                for t in self._tools.values()
            ]
        )

    async def _call_tool(self, ctx: Ctx, params: mcp.CallToolRequestParams) -> mcp.CallToolResult:
        name = params.name
        tool = self._tools.get(name)
        if tool is None:
            raise MCPError(
                INVALID_PARAMS,
                f"Unknown tool {name!r}; {self.name} hosts: {', '.join(self._tools) or 'none'}",
            )
        state = ctx.lifespan_context.state(ctx)
        peer = McpCallPeer(
            ctx,
            tool=name,
            log_floor=state.log_floor,
            request_timeout_s=self.config.client_request_timeout_s,
        )
        timeout = self.config.call_timeout_s
        context = ToolContext(
            call_id="" if ctx.request_id is None else str(ctx.request_id),
            timeout_s=timeout,
            notify=peer.notify,
            peer=peer,
        )
        started = time.perf_counter()
        result: mcp.CallToolResult | None = None
        with anyio.move_on_after(timeout) as deadline:
            try:
                output = await tool.call(params.arguments or {}, context)
                result = call_result(output, tool=name)
            except ToolError as exc:
                result = error_result(str(exc))
            except Exception as exc:  # a tool's bug must not take the server down
                log.exception("hosted_tool_crashed", server=self.name, tool=name)
                result = error_result(f"tool {name!r} failed: {type(exc).__name__}: {exc}")
        if result is None or deadline.cancelled_caught:
            result = error_result(f"tool {name!r} timed out after {timeout:g} s")
        log.debug(
            "hosted_tool_call",
            server=self.name,
            tool=name,
            is_error=result.is_error,
            ms=round((time.perf_counter() - started) * 1000, 1),
        )
        return result

    # -- logging -------------------------------------------------------------------

    async def _set_level(self, ctx: Ctx, params: mcp.SetLevelRequestParams) -> mcp.EmptyResult:
        ctx.lifespan_context.state(ctx).log_floor = params.level
        return mcp.EmptyResult()

    # -- resources -----------------------------------------------------------------

    async def _list_resources(
        self, ctx: Ctx, params: mcp.PaginatedRequestParams | None
    ) -> mcp.ListResourcesResult:
        resources = [
            mcp.Resource(
                uri=r.uri,
                name=r.name,
                description=r.description or r.name,
                mime_type=r.mime_type,
            )
            for r in self._resources.values()
        ]
        for template in self._templates.values():
            if template.listing is None:
                continue
            try:
                listed = await template.listing()
            except Exception as exc:  # one failing lister must not hide the rest
                log.warning(
                    "resource_listing_failed", template=template.uri_template, error=repr(exc)
                )
                continue
            resources.extend(
                mcp.Resource(
                    uri=entry.uri,
                    name=entry.name,
                    description=entry.description or entry.name,
                    mime_type=template.mime_type,
                )
                for entry in listed
            )
        return mcp.ListResourcesResult(resources=resources)

    async def _list_templates(
        self, ctx: Ctx, params: mcp.PaginatedRequestParams | None
    ) -> mcp.ListResourceTemplatesResult:
        return mcp.ListResourceTemplatesResult(
            resource_templates=[
                mcp.ResourceTemplate(
                    uri_template=t.uri_template,
                    name=t.name,
                    description=t.description or t.name,
                    mime_type=t.mime_type,
                )
                for t in self._templates.values()
            ]
        )

    async def _read_resource(
        self, ctx: Ctx, params: mcp.ReadResourceRequestParams
    ) -> mcp.ReadResourceResult:
        uri = params.uri
        static = self._resources.get(uri)
        if static is not None:
            contents = resource_contents(uri, static.mime_type, static.body)
            return mcp.ReadResourceResult(contents=[contents])
        for template in self._templates.values():
            variables = template.match(uri)
            if variables is None:
                continue
            try:
                body = await template.read(variables)
            except MCPError:
                raise  # the reader's own answer, e.g. RESOURCE_NOT_FOUND for an unknown id
            except Exception as exc:
                log.exception("hosted_resource_crashed", server=self.name, uri=uri)
                raise MCPError(
                    INTERNAL_ERROR, f"reading {uri!r} failed: {type(exc).__name__}: {exc}"
                ) from exc
            contents = resource_contents(uri, template.mime_type, body)
            return mcp.ReadResourceResult(contents=[contents])
        raise MCPError(RESOURCE_NOT_FOUND, f"Resource not found: {uri!r}", data={"uri": uri})

    def _hosts(self, uri: str) -> bool:
        return uri in self._resources or any(
            t.match(uri) is not None for t in self._templates.values()
        )

    async def _subscribe(self, ctx: Ctx, params: mcp.SubscribeRequestParams) -> mcp.EmptyResult:
        if not self._hosts(params.uri):
            raise MCPError(RESOURCE_NOT_FOUND, f"Resource not found: {params.uri!r}")
        state = ctx.lifespan_context.state(ctx)
        state.subscriptions.add(params.uri)
        state.session = ctx.session
        return mcp.EmptyResult()

    async def _unsubscribe(self, ctx: Ctx, params: mcp.UnsubscribeRequestParams) -> mcp.EmptyResult:
        ctx.lifespan_context.state(ctx).subscriptions.discard(params.uri)
        return mcp.EmptyResult()

    # -- prompts -------------------------------------------------------------------

    async def _list_prompts(
        self, ctx: Ctx, params: mcp.PaginatedRequestParams | None
    ) -> mcp.ListPromptsResult:
        return mcp.ListPromptsResult(
            prompts=[
                mcp.Prompt(
                    name=p.name,
                    description=p.description or p.name,
                    arguments=[
                        mcp.PromptArgument(
                            name=a.name, description=a.description or None, required=a.required
                        )
                        for a in p.arguments
                    ],
                )
                for p in self._prompts.values()
            ]
        )

    async def _get_prompt(
        self, ctx: Ctx, params: mcp.GetPromptRequestParams
    ) -> mcp.GetPromptResult:
        prompt = self._prompts.get(params.name)
        if prompt is None:
            raise MCPError(INVALID_PARAMS, f"Unknown prompt {params.name!r}")
        arguments = dict(params.arguments or {})
        missing = prompt.missing_arguments(arguments)
        if missing:
            raise MCPError(
                INVALID_PARAMS,
                f"prompt {prompt.name!r} needs argument(s): {', '.join(missing)}",
            )
        where = f"prompt {prompt.name!r}"
        try:
            rendered = await prompt.render(arguments)
            messages = [
                mcp.PromptMessage(role=m.role, content=content_block(m.content, where=where))
                for m in rendered
            ]
        except Exception as exc:
            log.exception("hosted_prompt_crashed", server=self.name, prompt=prompt.name)
            raise MCPError(
                INTERNAL_ERROR, f"{where} failed to render: {type(exc).__name__}: {exc}"
            ) from exc
        return mcp.GetPromptResult(description=prompt.description or None, messages=messages)

    # -- completion ----------------------------------------------------------------

    async def _complete(self, ctx: Ctx, params: mcp.CompleteRequestParams) -> mcp.CompleteResult:
        choices: list[str] = []
        ref = params.ref
        if isinstance(ref, mcp.PromptReference):
            prompt = self._prompts.get(ref.name)
            if prompt is not None:
                for argument in prompt.arguments:
                    if argument.name == params.argument.name:
                        choices = list(argument.choices)
        else:
            template = self._templates.get(ref.uri)
            if template is not None:
                choices = list(template.choices.get(params.argument.name, ()))
        values, total = complete(choices, params.argument.value)
        return mcp.CompleteResult(
            completion=mcp.Completion(values=values, total=total, has_more=total > len(values))
        )
