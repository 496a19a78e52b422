"""The daemon's ASGI application: routes, guards, errors.

Owns ``build_app``: the REST API over runs and agents (``/v1/runs``...),
Server-Sent Events of a run's events (resumable with ``Last-Event-ID``;
``POST /v1/runs`` with ``Accept: text/event-stream`` creates and follows),
``/openapi.json``, ``/healthz`` and ``/readyz``, plus the routes of the
other interfaces (OpenAI-compatible, MCP, metrics, the web page) handed in
by ``daemon``.  Every request passes ``Guard`` first, before its body is
read: a ``Host`` that is not the daemon's gets 421, an ``Origin`` other
than the daemon's own address or a configured one 403 (DNS-rebinding
protection, always on), and when a token or API keys are configured a
request without ``Authorization: Bearer <token or key>`` gets 401
(``?access_token=`` only on the event stream, which a browser's
``EventSource`` opens without headers), one whose key lacks the path's
scope 403, one past its key's rate 429 (``keys``); a
``Content-Length`` past ``server.max_request_bytes`` gets 413, and the body
is read under its size and time limits (``governance.BodyGuard``).  Every
error body is an ``ApiError`` saying what and where.

The roof: may import every layer.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final

import anyio
import msgspec
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from agentrt._version import __version__
from agentrt.protocols._api import (
    AgentList,
    ApiError,
    ElicitationAnswer,
    ElicitationList,
    McpAuthorizationList,
    RunInfo,
    ThreadCreate,
    ThreadInfo,
    ThreadPage,
)
from agentrt.protocols._codec import whole_numbers
from agentrt.protocols._events import TokenDelta
from agentrt.protocols._run import RunRequest, RunStatus
from agentrt.protocols._webhooks import WebhookDeliveryList
from agentrt.runtime.config._config_file import exact_origin
from agentrt.runtime.config._daemon_config import LOOPBACK_HOSTS, ServerConfig
from agentrt.runtime.observe._log import get_logger
from agentrt.runtime.serve._api_problem import ApiProblem, invalid, not_found, store_full
from agentrt.runtime.serve._bridge import RunService
from agentrt.runtime.serve._governance import (
    BodyGuard,
    LimitHit,
    check_json_depth,
    header_bytes,
    headers_too_large,
    too_deep,
    too_large,
)
from agentrt.runtime.serve._keys import CALLER, Caller, KeyRing, caller_of, path_scope
from agentrt.runtime.serve._openapi import MAX_EVENT_ID, openapi_document
from agentrt.runtime.serve._webhooks import takes_webhooks
from agentrt.runtime.serve.openai._openai_error import OpenAIError
from agentrt.runtime.serve.store._run_store import ANY_OWNER, Owner, StoreError
from agentrt.tools.hosting._transports import is_loopback

log = get_logger(__name__)

#: Event ids and cursors are SQLite integers (``MAX_EVENT_ID``): a larger
#: number cannot name one (and would overflow the query instead of being refused).
#: ``Last-Event-ID`` is these characters only.
_DIGITS: Final = re.compile(r"[0-9]*")
_STATUSES: Final = ("pending", "running", "waiting", "succeeded", "failed", "cancelled")
_WHERE = re.compile(r" - at `\$\.?([^`]*)`$")
_UNKNOWN_FIELD = re.compile(r"unknown field `([^`]+)`")
_OPEN_PATHS: Final = frozenset({"/healthz", "/readyz", "/"})
"""Paths served without the token: probes, and the web page's own files
(they hold no data; the page asks for the token before calling the API)."""
_EVENT_STREAM: Final = re.compile(r"^/v1/runs/[^/]+/events$")
"""The one path whose token may come in the query (``?access_token=``): a
browser's ``EventSource`` cannot send headers.  Elsewhere a token in a URL
would end up in logs and histories for nothing."""


def _is_open(path: str) -> bool:
    return path in _OPEN_PATHS or path.startswith("/static/")


def json_response(value: Any, status: int = 200) -> Response:
    return Response(msgspec.json.encode(value), status, media_type="application/json")


def problem_response(problem: ApiProblem) -> Response:
    response = json_response(problem.body(), problem.status)
    if problem.retry_after is not None:
        response.headers["retry-after"] = str(problem.retry_after)
    if problem.status in (408, 413):  # a body cut short: the rest is never read
        response.headers["connection"] = "close"
    return response


def _plain_problem(status: int, error: str, message: str, where: str | None) -> bytes:
    return msgspec.json.encode(ApiError(error=error, message=message, where=where, status=status))


def _no_hits(_key: str) -> None:
    pass


# -- guard -----------------------------------------------------------------------


class Guard:
    """Host, Origin and bearer-token checks in front of every route (the
    ``Caller`` a token stands for goes in the scope: ``caller_of``), then
    the request's body limits (``server``; ``hit`` is told each limit hit)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        hosts: Sequence[str],
        origins: Sequence[str],
        token: str | None,
        server: ServerConfig | None = None,
        hit: LimitHit = _no_hits,
    ) -> None:
        self.app = app
        self.hosts = {h.lower() for h in hosts}
        self.origins = {exact_origin(o) for o in origins}
        self.server = server or ServerConfig()
        self.keys = KeyRing(self.server, token=token)
        self.hit = hit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        host = headers.get("host", "").lower()
        if host not in self.hosts:
            await self._refuse(
                send, 421, "misdirected", f"host {host!r} is not served here", "Host"
            )
            return
        origin = headers.get("origin")
        if origin is not None and not self._trusted(origin):
            await self._refuse(
                send, 403, "forbidden", f"origin {origin!r} is not allowed", "Origin"
            )
            return
        if self.keys.required and not _is_open(scope["path"]):
            caller = self._caller(headers, scope)
            if caller is None:
                await self._refuse(
                    send,
                    401,
                    "unauthorized",
                    "missing or wrong bearer token (Authorization: Bearer <token or key>)",
                    "Authorization",
                )
                return
            try:
                for needed in path_scope(scope.get("method", "GET"), scope["path"]):
                    caller.require(needed)
                self.keys.admit(caller)
            except ApiProblem as refusal:
                if refusal.status == 429:
                    self.hit("server.keys.rate_per_minute")
                await self._refuse(
                    send,
                    refusal.status,
                    refusal.error,
                    refusal.message,
                    refusal.where or "",
                    retry_after=refusal.retry_after,
                )
                return
            scope[CALLER] = caller
        if scope["type"] == "http":
            problem: ApiProblem | None = None
            length = headers.get("content-length", "")
            if header_bytes(scope) > self.server.max_header_bytes:
                problem = headers_too_large(self.server.max_header_bytes)
            elif length.isdigit() and int(length) > self.server.max_request_bytes:
                problem = too_large(self.server.max_request_bytes)
            if problem is not None:
                self.hit(problem.where or "")
                await self._refuse(
                    send, problem.status, problem.error, problem.message, problem.where or ""
                )
                return
            receive = BodyGuard(self.server, receive, self.hit)
        await self.app(scope, receive, send)

    def _trusted(self, origin: str) -> bool:
        try:
            return exact_origin(origin) in self.origins
        except ValueError:  # "null" (a sandboxed page, a file) or garbage
            return False

    def _caller(self, headers: dict[str, str], scope: Scope) -> Caller | None:
        given = headers.get("authorization", "")
        if given[:7].lower() == "bearer ":
            return self.keys.identify(given[7:].strip())
        if not _EVENT_STREAM.match(scope["path"]):
            return None
        query = scope.get("query_string", b"").decode("latin-1")
        for part in query.split("&"):  # EventSource cannot set headers
            if part.startswith("access_token="):
                return self.keys.identify(part[13:])
        return None

    @staticmethod
    async def _refuse(
        send: Send,
        status: int,
        error: str,
        message: str,
        where: str,
        *,
        retry_after: int | None = None,
    ) -> None:
        body = _plain_problem(status, error, message, where)
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", b"%d" % len(body)),
            (b"connection", b"close"),
        ]
        if status == 401:
            headers.append((b"www-authenticate", b'Bearer realm="agentrt"'))
        if retry_after is not None:
            headers.append((b"retry-after", b"%d" % retry_after))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def allowed_hosts(host: str, port: int, extra: Sequence[str]) -> list[str]:
    """``Host`` values the daemon answers to: loopback names (and the bound
    address) with and without the port, plus configured ones."""
    names = {*LOOPBACK_HOSTS, "[::1]"}
    if not is_loopback(host) and host not in ("0.0.0.0", "::"):  # noqa: S104 - compared, not bound
        names.add(host)
    out = [*extra]
    for name in names:
        bracketed = f"[{name}]" if ":" in name and not name.startswith("[") else name
        out += [bracketed, f"{bracketed}:{port}"]
    return out


def allowed_origins(host: str, port: int, extra: Sequence[str]) -> list[str]:
    """Browser origins trusted: the daemon's own address under each of its
    loopback names (and the bound address), with its port, plus the
    configured ones; every entry an exact ``scheme://host:port``."""
    names = {*LOOPBACK_HOSTS}
    if not is_loopback(host) and host not in ("0.0.0.0", "::"):  # noqa: S104 - compared, not bound
        names.add(host.strip("[]"))
    own = [exact_origin(f"http://{f'[{n}]' if ':' in n else n}:{port}") for n in sorted(names)]
    return own + [exact_origin(o) for o in extra]


# -- handlers --------------------------------------------------------------------


def _too_big(text: str) -> bool:
    """An integer SQLite cannot hold (anything else is the manager's to judge)."""
    try:
        return abs(int(text)) > MAX_EVENT_ID
    except ValueError:
        return False


Handler = Callable[[Request], Awaitable[Response]]


def _full_store(path: str, exc: StoreError) -> Response:
    """A write the full disk refused: 507 with ``Retry-After``, not a 500 (no bug)."""
    log.warning("store_full", path=path, store=exc.store, error=str(exc))
    return problem_response(store_full(exc.store, exc.operation, str(exc.__cause__)))


def _crashed(path: str, exc: Exception) -> Response:
    """A request that raised what no handler expected: 500, logged."""
    if isinstance(exc, StoreError) and exc.full:  # a route outside ``_handled``
        return _full_store(path, exc)
    log.error("request_crashed", path=path, exc_info=exc)
    return json_response(
        ApiError(error="internal", message=f"{type(exc).__name__}: {exc}", status=500), 500
    )


def _handled(handler: Handler) -> Handler:
    async def run(request: Request) -> Response:
        try:
            return await handler(request)
        except ApiProblem as problem:
            return problem_response(problem)
        except StoreError as exc:
            if not exc.full:
                raise
            return _full_store(request.url.path, exc)

    run.__name__ = handler.__name__
    return run


async def read_json(request: Request, type_: type[Any], *, max_depth: int) -> Any:
    """The request body decoded as ``type_``, or a 400/422 naming the field
    (its size and time are bounded by the ``Guard``; its nesting here)."""
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
    if not body.strip():
        raise ApiProblem(400, "invalid_json", "the body is empty; send a JSON object", where="body")
    check_json_depth(bytes(body), max_depth)
    try:
        try:
            return msgspec.json.decode(bytes(body), type=type_)
        except msgspec.ValidationError:
            try:  # 130.0 for an integer: again with integral floats as ints
                return msgspec.convert(whole_numbers(msgspec.json.decode(bytes(body))), type_)
            except msgspec.ValidationError:
                pass
            raise  # the first error: its path names the field
    except RecursionError:
        raise too_deep(max_depth) from None
    except msgspec.ValidationError as exc:
        text = str(exc)
        match = _WHERE.search(text)
        where = match.group(1) if match and match.group(1) else "body"
        message = text[: match.start()] if match else text
        unknown = _UNKNOWN_FIELD.search(message)
        if unknown is not None:  # a misspelt or misplaced field: the request is malformed
            field = unknown.group(1)
            raise ApiProblem(
                400,
                "unknown_field",
                f"unknown field {field!r} (see /openapi.json for the fields it takes)",
                where=field if where == "body" else f"{where}.{field}",
            ) from None
        raise invalid(message, where=where) from None
    except msgspec.DecodeError as exc:
        raise ApiProblem(400, "invalid_json", f"not valid JSON: {exc}", where="body") from None


async def _readiness(manager: RunService) -> Response:
    """``/readyz``: 200 when runs are accepted and every model backend
    answers its probe (each one's health in ``backends``); else 503 saying
    why (a dead model server is named: its runs would fail)."""
    if not (manager.ready and manager.accepting):
        state = "shutting down" if manager.ready else "starting"
        return json_response(
            ApiError(error="unavailable", message=f"not ready: {state}", status=503), 503
        )
    health = await manager.backend_health()
    down = [f"backend {name!r}: {h.detail}" for name, h in health.items() if not h.ok]
    if down:
        problem = ApiError(
            error="unavailable",
            message="not ready: " + "; ".join(down),
            where="backends",
            status=503,
        )
        return json_response({**msgspec.structs.asdict(problem), "backends": health}, 503)
    return json_response({"status": "ready", "active_runs": manager.active(), "backends": health})


async def visible_run(manager: RunService, request: Request | Scope, run_id: str) -> RunInfo:
    """The run ``run_id`` if the request's caller may see it (its own, or
    any with ``runs:read_all``); else the same 404 as for no such run, so
    that a key learns nothing of another key's runs."""
    info = await manager.get(run_id)
    if info is None or not caller_of(request).sees(info.owner):
        raise not_found("run", run_id, where="run_id")
    return info


async def _visible_thread(manager: RunService, request: Request, thread_id: str) -> ThreadInfo:
    """As ``visible_run``, for a thread."""
    found = await manager.thread(thread_id)
    if found is None or not caller_of(request).sees(found.owner):
        raise not_found("thread", thread_id, where="thread_id")
    return found


def _owned_by(request: Request) -> Owner:
    """Whose runs and threads a listing shows: the caller's, or all."""
    caller = caller_of(request)
    return ANY_OWNER if caller.reads_all else caller.name


def _elicitation_route(manager: RunService) -> BaseRoute:
    """``POST /v1/runs/{run_id}/elicitations/{question_id}``: answer the
    question an MCP server asked through the run's ``elicitation`` event."""

    async def answer_elicitation(request: Request) -> Response:
        run_id, question_id = request.path_params["run_id"], request.path_params["question_id"]
        answer: ElicitationAnswer = await read_json(
            request, ElicitationAnswer, max_depth=manager.config.server.max_json_depth
        )
        await visible_run(manager, request, run_id)
        info = await manager.answer_elicitation(run_id, question_id, answer)
        if info is None:
            raise not_found("run", run_id, where="run_id")
        return json_response(info)

    return Route(
        "/v1/runs/{run_id}/elicitations/{question_id}",
        _handled(answer_elicitation),
        methods=["POST"],
    )


def _waiting_routes(manager: RunService) -> list[BaseRoute]:
    """``GET /v1/elicitations``: the questions the caller's runs wait on;
    ``GET /v1/runs/{run_id}/webhook-deliveries``: a run's webhook deliveries."""

    async def questions(request: Request) -> Response:
        run_id = request.query_params.get("run_id")
        if run_id is not None:
            await visible_run(manager, request, run_id)
        found = await manager.questions(run_id=run_id, owner=_owned_by(request))
        return json_response(ElicitationList(questions=found))

    async def deliveries(request: Request) -> Response:
        run_id = request.path_params["run_id"]
        await visible_run(manager, request, run_id)
        found = await manager.webhook_deliveries(run_id)
        return json_response(WebhookDeliveryList(deliveries=found))

    return [
        Route("/v1/elicitations", _handled(questions), methods=["GET"]),
        Route("/v1/runs/{run_id}/webhook-deliveries", _handled(deliveries), methods=["GET"]),
    ]


def _thread_routes(manager: RunService) -> list[BaseRoute]:
    """``/v1/threads``: conversations the run store holds (``RunService.submit_in_thread``)."""

    async def threads(request: Request) -> Response:
        if request.method == "POST":
            created: ThreadCreate = await read_json(
                request, ThreadCreate, max_depth=manager.config.server.max_json_depth
            )
            owner = caller_of(request).name
            return json_response(await manager.create_thread(created.metadata, owner=owner), 201)
        limit_text = request.query_params.get("limit", "50")
        try:
            limit = int(limit_text)
        except ValueError:
            raise invalid(f"not an integer: {limit_text!r}", where="query.limit") from None
        if not 1 <= limit <= 500:  # as for runs
            raise invalid(f"must be between 1 and 500, got {limit}", where="query.limit")
        found = await manager.list_threads(limit=limit, owner=_owned_by(request))
        return json_response(ThreadPage(threads=found))

    async def thread(request: Request) -> Response:
        thread_id = request.path_params["thread_id"]
        found = await _visible_thread(manager, request, thread_id)
        if request.method == "DELETE":
            if not await manager.delete_thread(thread_id):
                raise not_found("thread", thread_id, where="thread_id")
            return Response(status_code=204)
        return json_response(found)

    async def thread_runs(request: Request) -> Response:
        body: RunRequest = await read_json(
            request, RunRequest, max_depth=manager.config.server.max_json_depth
        )
        if body.options.conversation:
            raise ApiProblem(
                400,
                "unsupported_field",
                "a thread's run takes its task alone: the thread holds the conversation",
                where="options.conversation",
            )
        thread_id = request.path_params["thread_id"]
        await _visible_thread(manager, request, thread_id)
        info = await manager.submit_in_thread(thread_id, body, owner=caller_of(request).name)
        return json_response(info, 201)

    return [
        Route("/v1/threads", _handled(threads), methods=["GET", "POST"]),
        Route("/v1/threads/{thread_id}", _handled(thread), methods=["GET", "DELETE"]),
        Route("/v1/threads/{thread_id}/runs", _handled(thread_runs), methods=["POST"]),
    ]


def _refuse_conversation(body: RunRequest) -> None:
    """A REST run is a task: a conversation goes through the OpenAI routes."""
    if body.options.conversation:
        raise ApiProblem(
            400,
            "unsupported_field",
            "a conversation reaches a run through /v1/chat/completions or /v1/responses "
            "(as messages or input items); here, send the task alone",
            where="options.conversation",
        )


def _rollout_routes(manager: RunService) -> list[BaseRoute]:
    """A run's rollouts: their summaries, one's trajectory."""

    async def summaries(request: Request) -> Response:
        run_id = request.path_params["run_id"]
        await visible_run(manager, request, run_id)
        return json_response(await manager.summaries(run_id))

    async def trajectory(request: Request) -> Response:
        run_id, rollout_id = request.path_params["run_id"], request.path_params["rollout_id"]
        info = await manager.get(run_id)
        found = None
        if info is not None and caller_of(request).sees(info.owner):
            found = await manager.trajectory(run_id, rollout_id)
        if found is None:
            raise not_found("rollout", f"{run_id}/{rollout_id}", where="rollout_id")
        return json_response(found)

    return [
        Route("/v1/runs/{run_id}/summaries", _handled(summaries), methods=["GET"]),
        Route("/v1/runs/{run_id}/rollouts/{rollout_id}", _handled(trajectory), methods=["GET"]),
    ]


def _openapi_route(manager: RunService) -> BaseRoute:
    """``/openapi.json``: the document, made once."""
    server = manager.config.server
    doc = msgspec.json.encode(
        openapi_document(
            version=__version__,
            token=server.resolved_token() is not None or bool(server.keys),
            models=[a.model for a in manager.agents()],
            max_rollouts=server.max_rollouts,
            webhooks=takes_webhooks(server.webhook),
            usd_caps=manager.usd_caps,
            agents=[a.name for a in manager.agents()],
        )
    )

    async def openapi(_request: Request) -> Response:
        return Response(doc, media_type="application/json")

    return Route("/openapi.json", openapi, methods=["GET"])


def routes(manager: RunService) -> list[BaseRoute]:
    """The REST API over ``manager``."""

    async def create_run(request: Request) -> Response:
        body: RunRequest = await read_json(
            request, RunRequest, max_depth=manager.config.server.max_json_depth
        )
        _refuse_conversation(body)
        follow = _wants_stream(request)  # create and follow in one call
        if follow and not body.stream_tokens:
            body = msgspec.structs.replace(body, stream_tokens=True)
        info = await manager.submit(body, owner=caller_of(request).name)
        if follow:
            return _RunStreamResponse(events, info.run_id)
        return json_response(info, 201)

    async def list_runs(request: Request) -> Response:
        q = request.query_params
        status = q.get("status")
        if status is not None and status not in _STATUSES:
            raise invalid(f"must be one of {', '.join(_STATUSES)}", where="query.status")
        limit_text = q.get("limit", "50")
        try:
            limit = int(limit_text)
        except ValueError:
            raise invalid(f"not an integer: {limit_text!r}", where="query.limit") from None
        typed: RunStatus | None = None
        for s in _STATUSES:
            if s == status:
                typed = s
        cursor = q.get("cursor")
        if cursor is not None and _too_big(cursor):
            raise invalid(f"not a cursor this daemon issued: {cursor!r}", where="query.cursor")
        page = await manager.list(
            status=typed, limit=limit, cursor=cursor, owner=_owned_by(request)
        )
        return json_response(page)

    events = EventStream(manager)

    async def runs(request: Request) -> Response:
        return await (create_run if request.method == "POST" else list_runs)(request)

    async def get_run(request: Request) -> Response:  # HEAD; a GET is a ``status_read``
        body = await run_status(manager, request.scope, request.path_params["run_id"])
        return Response(body, media_type="application/json")

    async def cancel_run(request: Request) -> Response:
        run_id = request.path_params["run_id"]
        await visible_run(manager, request, run_id)
        info = await manager.cancel(run_id)
        if info is None:
            raise not_found("run", run_id, where="run_id")
        return json_response(info)

    async def agents(_request: Request) -> Response:
        return json_response(AgentList(agents=manager.agents()))

    async def mcp_authorizations(_request: Request) -> Response:
        return json_response(McpAuthorizationList(pending=await manager.mcp_authorizations()))

    async def healthz(_request: Request) -> Response:
        return json_response({"status": "ok", "version": __version__})

    async def readyz(_request: Request) -> Response:
        return await _readiness(manager)

    return [
        # One route per path, so a 405's ``Allow`` lists every method the path has.
        Route("/v1/runs", _handled(runs), methods=["GET", "POST"]),
        Route("/v1/runs/{run_id}", _handled(get_run), methods=["GET"]),
        Route("/v1/runs/{run_id}/cancel", _handled(cancel_run), methods=["POST"]),
        _elicitation_route(manager),
        *_waiting_routes(manager),
        Route("/v1/runs/{run_id}/events", events, methods=["GET"]),
        *_rollout_routes(manager),
        *_thread_routes(manager),
        Route("/v1/agents", _handled(agents), methods=["GET"]),
        Route("/v1/mcp/authorizations", _handled(mcp_authorizations), methods=["GET"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        _openapi_route(manager),
    ]


# -- server-sent events ----------------------------------------------------------


class EventStream:
    """``GET /v1/runs/{run_id}/events``: the run's events as SSE (a raw ASGI
    endpoint: one task follows the run, one sends keep-alives, one watches
    for the client leaving).  While a client follows, the run's model calls
    stream and their text comes as ``token`` events, which have no ``id``
    (they are not stored; the steps carry the whole text)."""

    def __init__(self, manager: RunService) -> None:
        self.manager = manager

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        run_id = request.path_params["run_id"]
        try:
            after = self._after(request)
            await visible_run(self.manager, request, run_id)
        except ApiProblem as problem:
            await problem_response(problem)(scope, receive, send)
            return
        await self.stream(run_id, after, receive, send)

    async def stream(
        self,
        run_id: str,
        after: int,
        receive: Receive,
        send: Send,
        *,
        status: int = 200,
        headers: Sequence[tuple[bytes, bytes]] = (),
    ) -> None:
        """Send the events of ``run_id`` after ``after`` as the response."""
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"text/event-stream; charset=utf-8"),
                    (b"cache-control", b"no-cache"),
                    (b"x-accel-buffering", b"no"),
                    *headers,
                ],
            }
        )
        lock = anyio.Lock()
        keepalive = self.manager.config.server.sse_keepalive_s

        async def write(chunk: bytes, more: bool = True) -> None:
            async with lock:
                await send({"type": "http.response.body", "body": chunk, "more_body": more})

        async with anyio.create_task_group() as tg:

            async def pump() -> None:
                await write(b"retry: 2000\n\n")
                async for event in self.manager.follow(run_id, after=after, tokens=True):
                    data = msgspec.json.encode(event)
                    if type(event) is TokenDelta:
                        # No ``id``: tokens are not stored, so a reconnecting
                        # client resumes after the last stored event.
                        await write(b"event: token\ndata: %s\n\n" % data)
                        continue
                    kind = type(event).__struct_config__.tag
                    await write(
                        b"id: %d\nevent: %s\ndata: %s\n\n" % (event.seq, str(kind).encode(), data)
                    )
                await write(b"", more=False)
                tg.cancel_scope.cancel()

            async def ping() -> None:
                while True:
                    await anyio.sleep(keepalive)
                    await write(b": keep-alive\n\n")

            async def watch() -> None:
                while (await receive())["type"] != "http.disconnect":
                    pass
                tg.cancel_scope.cancel()

            tg.start_soon(pump)
            tg.start_soon(ping)
            tg.start_soon(watch)

    @staticmethod
    def _after(request: Request) -> int:
        """``Last-Event-ID`` (a reconnecting ``EventSource``) wins over
        ``?after=``; both are checked when both are sent."""
        after = 0
        for where, raw in (
            ("query.after", request.query_params.get("after")),
            ("Last-Event-ID", request.headers.get("last-event-id")),
        ):
            if not raw:
                continue
            after = _event_id(raw, where, header=where == "Last-Event-ID")
        return after


def _wants_stream(request: Request) -> bool:
    """Whether ``POST /v1/runs`` asked for the run's events (``Accept:
    text/event-stream``) rather than its ``RunInfo``."""
    accept = request.headers.get("accept", "")
    return any(part.split(";")[0].strip() == "text/event-stream" for part in accept.split(","))


class _RunStreamResponse(Response):
    """``POST /v1/runs`` answered as a stream: 201, ``Location`` naming the
    run (a client that loses the connection resumes at its ``/events``),
    then the run's events as ``GET /v1/runs/{run_id}/events`` sends them."""

    def __init__(self, events: EventStream, run_id: str) -> None:
        super().__init__(status_code=201)
        self.events = events
        self.run_id = run_id

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        location = f"/v1/runs/{self.run_id}".encode()
        await self.events.stream(
            self.run_id, 0, receive, send, status=201, headers=[(b"location", location)]
        )


def _event_id(raw: str, where: str, *, header: bool) -> int:
    """The event id in ``raw``.  The header takes decimal digits only, leading
    zeros included (the document's ``LAST_EVENT_ID_PATTERN``); the query
    parameter is read as the other query integers are."""
    if header:
        if not _DIGITS.fullmatch(raw):
            raise invalid(f"not an event id: {raw!r}", where=where)
        digits = raw.lstrip("0") or "0"
        # int() refuses a string past sys.int_max_str_digits: bound it first.
        after = int(digits) if len(digits) <= len(str(MAX_EVENT_ID)) else MAX_EVENT_ID + 1
    else:
        try:
            after = int(raw)
        except ValueError:
            raise invalid(f"not an event id: {raw!r}", where=where) from None
    if not 0 <= after <= MAX_EVENT_ID:
        shown = raw if len(raw) <= 40 else f"{raw[:20]}... ({len(raw)} characters)"
        raise invalid(f"must be between 0 and {MAX_EVENT_ID}, got {shown}", where=where)
    return after


async def run_status(manager: RunService, scope: Scope, run_id: str) -> bytes:
    """``GET /v1/runs/{run_id}``'s body: the run's ``RunDetail``, if the
    caller may see it (else the 404 of no such run)."""
    detail = await manager.detail(run_id)
    if detail is None or not caller_of(scope).sees(detail.run.owner):
        raise not_found("run", run_id, where="run_id")
    return msgspec.json.encode(detail)


_RUN_PATH: Final = re.compile(r"/v1/runs/([^/]+)")
_JSON_HEADERS: Final = (b"content-type", b"application/json")


def status_reads(app: ASGIApp, manager: RunService) -> ASGIApp:
    """``app`` with ``GET /v1/runs/{run_id}`` answered here, before its
    routing: the read every waiting client repeats, so it costs the lookup,
    one encoding and two ASGI messages, not Starlette's router and response
    objects (docs/design/performance.md).  Its errors are answered as the
    app's (``_handled``, the app's crash handler)."""

    async def serve(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "GET":
            match = _RUN_PATH.fullmatch(scope["path"])
            if match is not None:
                await _status_read(scope, receive, send, match.group(1))
                return
        await app(scope, receive, send)

    async def _status_read(scope: Scope, receive: Receive, send: Send, run_id: str) -> None:
        try:
            body = await run_status(manager, scope, run_id)
        except ApiProblem as problem:
            await problem_response(problem)(scope, receive, send)
            return
        except Exception as exc:  # answered as the app's crash handler answers it
            await _crashed(scope["path"], exc)(scope, receive, send)
            return
        headers = [_JSON_HEADERS, (b"content-length", b"%d" % len(body))]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    return serve


_OWN_API: Final = ("/v1/runs", "/v1/agents", "/v1/threads", "/v1/elicitations")


def _openai_path(path: str) -> bool:
    """Under ``/v1`` but not agentrt's own API: OpenAI's paths, known or not."""
    return path.startswith("/v1/") and not any(
        path == own or path.startswith(own + "/") for own in _OWN_API
    )


def build_app(
    manager: RunService,
    *,
    port: int,
    extra_routes: Sequence[BaseRoute] = (),
    lifespan: Any = None,
    hit: LimitHit = _no_hits,
) -> ASGIApp:
    """The whole daemon app behind its ``Guard`` (``hit``: told the key of
    each limit a request hits)."""
    server = manager.config.server
    app = Starlette(routes=[*routes(manager), *extra_routes], lifespan=lifespan)

    async def not_found_handler(_request: Request, exc: Exception) -> Response:
        status = getattr(exc, "status_code", 404)
        kind = (
            "not_found"
            if status == 404
            else "method_not_allowed"
            if status == 405
            else "bad_request"
        )
        detail = getattr(exc, "detail", "") or "no such endpoint"
        if _openai_path(_request.url.path):  # an OpenAI client reads OpenAI's shape
            refusal = OpenAIError(
                status,
                f"{detail}: {_request.method} {_request.url.path}; agentrt's OpenAI-compatible "
                "endpoints are /v1/chat/completions, /v1/responses and /v1/models",
                code=kind,
            )
            response = json_response(refusal.body(), status)
        else:
            response = json_response(
                ApiError(error=kind, message=str(detail), where="path", status=status), status
            )
        # Starlette's 405 carries ``Allow`` (RFC 9110 requires it); keep it.
        response.headers.update(getattr(exc, "headers", None) or {})
        return response

    async def crash_handler(request: Request, exc: Exception) -> Response:
        return _crashed(request.url.path, exc)

    async def problem_handler(_request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ApiProblem)  # a limit hit while a body was read
        return problem_response(exc)

    from starlette.exceptions import HTTPException

    app.add_exception_handler(HTTPException, not_found_handler)
    app.add_exception_handler(ApiProblem, problem_handler)
    app.add_exception_handler(Exception, crash_handler)
    return Guard(
        status_reads(app, manager),
        hosts=allowed_hosts(server.host, port, server.allowed_hosts),
        origins=allowed_origins(server.host, port, server.allowed_origins),
        token=server.resolved_token(),
        server=server,
        hit=hit,
    )


__all__ = [
    "EventStream",
    "Guard",
    "build_app",
    "json_response",
    "read_json",
    "routes",
    "run_status",
    "status_reads",
]
