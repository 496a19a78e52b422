"""The daemon's OpenAPI 3.1 document, built from the wire types.

The request and response schemas come from the msgspec types themselves
(``msgspec.json.schema_components``), so the document cannot drift from
what the daemon decodes and encodes.  Owns ``openapi_document``.

May import protocols only.
"""

from __future__ import annotations

from typing import Any

import msgspec

from agentrt.protocols import Event, RunRequest, Trajectory, TrajectorySummary
from agentrt.protocols.api import AgentList, ApiError, RunDetail, RunInfo, RunPage

#: Event ids are SQLite integers.
_MAX_EVENT_ID = (1 << 63) - 1

_TYPES: tuple[Any, ...] = (
    RunRequest,
    RunInfo,
    RunDetail,
    RunPage,
    AgentList,
    ApiError,
    Trajectory,
    list[TrajectorySummary],
    Event,
)


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _errors(*codes: int) -> dict[str, Any]:
    text = {
        400: "Malformed request (bad JSON, wrong types)",
        401: "Missing or wrong bearer token",
        404: "No such run, rollout or agent",
        422: "Well-formed but invalid (the body says which field and why)",
        503: "Shutting down",
    }
    return {str(c): _json(_ref("ApiError"), text[c]) for c in codes}


def _run_id() -> dict[str, Any]:
    return {"name": "run_id", "in": "path", "required": True, "schema": {"type": "string"}}


def openapi_document(*, version: str, token: bool) -> dict[str, Any]:
    """The document served at ``/openapi.json``."""
    (schemas, components) = msgspec.json.schema_components(
        _TYPES, ref_template="#/components/schemas/{name}"
    )
    event_union = schemas[_TYPES.index(Event)]
    components["Event"] = event_union
    trajectory_summaries = {"type": "array", "items": _ref("TrajectorySummary")}
    # In OpenAPI 3.1 the ``schema`` of ``text/event-stream`` describes one event.
    sse_event = {
        "type": "object",
        "required": ["id", "event", "data"],
        "properties": {
            "id": {"type": "string", "pattern": "^[0-9]+$"},
            "event": {"type": "string", "enum": sorted(event_union["discriminator"]["mapping"])},
            "data": {
                "type": "string",
                "contentMediaType": "application/json",
                "contentSchema": _ref("Event"),
            },
            "retry": {"type": "integer", "minimum": 0},
        },
    }
    sse = {
        "description": "Server-Sent Events: `id` is the event's seq, `event` its type, "
        "`data` the event as JSON; resume with `Last-Event-ID` (or `?after=`).",
        "content": {"text/event-stream": {"schema": sse_event}},
    }
    event_id = {"type": "integer", "minimum": 0, "maximum": _MAX_EVENT_ID}
    from_created = {
        "parameters": {"run_id": "$response.body#/run_id"},
        "description": "The run just created",
    }
    run_links = {
        "getRun": {"operationId": "getRun", **from_created},
        "cancelRun": {"operationId": "cancelRun", **from_created},
        "runEvents": {"operationId": "runEvents", **from_created},
        "runSummaries": {"operationId": "runSummaries", **from_created},
    }
    paths: dict[str, Any] = {
        "/v1/runs": {
            "post": {
                "operationId": "createRun",
                "summary": "Start a run",
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": _ref("RunRequest")}},
                },
                "responses": {
                    "201": {**_json(_ref("RunInfo"), "The run, admitted"), "links": run_links},
                    **_errors(400, 401, 404, 422, 503),
                },
            },
            "get": {
                "operationId": "listRuns",
                "summary": "Runs, newest first",
                "parameters": [
                    {
                        "name": "status",
                        "in": "query",
                        "schema": {
                            "type": "string",
                            "enum": ["pending", "running", "succeeded", "failed", "cancelled"],
                        },
                    },
                    {
                        "name": "limit",
                        "in": "query",
                        "schema": {"type": "integer", "minimum": 1, "maximum": 500, "default": 50},
                    },
                    {
                        "name": "cursor",
                        "in": "query",
                        "description": "The `next_cursor` of the previous page",
                        "schema": {"type": "string"},
                    },
                ],
                "responses": {"200": _json(_ref("RunPage"), "A page of runs"), **_errors(401, 422)},
            },
        },
        "/v1/runs/{run_id}": {
            "get": {
                "operationId": "getRun",
                "parameters": [_run_id()],
                "responses": {
                    "200": {
                        **_json(_ref("RunDetail"), "The run"),
                        "links": {
                            "getTrajectory": {
                                "operationId": "getTrajectory",
                                "parameters": {
                                    "run_id": "$response.body#/run/run_id",
                                    "rollout_id": "$response.body#/rollouts/0/rollout_id",
                                },
                                "description": "The run's first rollout",
                            }
                        },
                    },
                    **_errors(401, 404),
                },
            }
        },
        "/v1/runs/{run_id}/cancel": {
            "post": {
                "operationId": "cancelRun",
                "parameters": [_run_id()],
                "responses": {
                    "200": _json(_ref("RunInfo"), "The run, now terminal"),
                    **_errors(401, 404),
                },
            }
        },
        "/v1/runs/{run_id}/events": {
            "get": {
                "operationId": "runEvents",
                "parameters": [
                    _run_id(),
                    {"name": "after", "in": "query", "schema": event_id},
                    {
                        "name": "Last-Event-ID",
                        "in": "header",
                        "description": "The `id` of the last event received (wins over "
                        "`after`; empty: from the start)",
                        "schema": {"type": "string", "pattern": "^[0-9]*$"},
                    },
                ],
                "responses": {"200": sse, **_errors(401, 404, 422)},
            }
        },
        "/v1/runs/{run_id}/summaries": {
            "get": {
                "operationId": "runSummaries",
                "parameters": [_run_id()],
                "responses": {
                    "200": _json(trajectory_summaries, "One summary per finished rollout"),
                    **_errors(401, 404),
                },
            }
        },
        "/v1/runs/{run_id}/rollouts/{rollout_id}": {
            "get": {
                "operationId": "getTrajectory",
                "parameters": [
                    _run_id(),
                    {
                        "name": "rollout_id",
                        "in": "path",
                        "required": True,
                        "schema": {"type": "string"},
                    },
                ],
                "responses": {
                    "200": _json(_ref("Trajectory"), "The rollout's committed steps"),
                    **_errors(401, 404),
                },
            }
        },
        "/v1/agents": {
            "get": {
                "operationId": "listAgents",
                "responses": {"200": _json(_ref("AgentList"), "Agents"), **_errors(401)},
            }
        },
        "/healthz": {
            "get": {
                "operationId": "healthz",
                "security": [],
                "responses": {"200": {"description": "The process is up"}},
            }
        },
        "/readyz": {
            "get": {
                "operationId": "readyz",
                "security": [],
                "responses": {
                    "200": {"description": "Accepting runs"},
                    "503": {"description": "Starting, resuming or shutting down"},
                },
            }
        },
    }
    doc: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {
            "title": "agentrt daemon",
            "version": version,
            "description": "Runs agents with inference-time scaling. The OpenAI-compatible "
            "endpoint (/v1/chat/completions, /v1/models) and the MCP endpoint (/mcp) "
            "follow their own specifications.",
        },
        "paths": paths,
        "components": {"schemas": components},
    }
    if token:
        doc["components"]["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
        doc["security"] = [{"bearer": []}]
    return doc


__all__ = ["openapi_document"]
