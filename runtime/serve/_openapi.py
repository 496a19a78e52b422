"""The daemon's OpenAPI 3.1 document, built from the wire types.

The request and response schemas come from the msgspec types themselves
(``msgspec.json.schema_components``), so the document cannot drift from
what the daemon decodes and encodes; what the daemon's configuration adds
(the rollouts limit, whether USD caps are accepted) and the aggregators'
own options (their pydantic configurations) are written in, so a request
the document allows is one the daemon takes.  Owns ``openapi_document``.
It covers the REST API and the OpenAI-compatible endpoints (whose
refusals have OpenAI's shape, ``ErrorBody``); the MCP endpoint follows its
own protocol.

May import protocols, the aggregators' configurations and the OpenAI wire types.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec
from pydantic import TypeAdapter

from agentrt.aggregators._compose import AggregatorConfig
from agentrt.protocols._api import (
    AgentList,
    ApiError,
    ElicitationAnswer,
    ElicitationList,
    McpAuthorizationList,
    RunDetail,
    RunInfo,
    RunPage,
    ThreadCreate,
    ThreadInfo,
    ThreadPage,
)
from agentrt.protocols._events import Event
from agentrt.protocols._run import RunRequest
from agentrt.protocols._trajectory import Trajectory, TrajectorySummary
from agentrt.protocols._webhooks import (
    WEBHOOK_URL_MAX,
    WEBHOOK_URL_PATTERN,
    WebhookDeliveryList,
)
from agentrt.runtime.wire._chat import ChatCompletion, ChatCompletionChunk, ChatCompletionRequest
from agentrt.runtime.wire._common import ErrorBody, ModelCard, ModelList
from agentrt.runtime.wire._responses import (
    LOGPROBS_INCLUDE,
    ConversationCreate,
    ConversationDeleted,
    ConversationObject,
    ResponseObject,
    ResponseRequest,
    StreamEvent,
)

#: Event ids are SQLite integers.
MAX_EVENT_ID: Final = (1 << 63) - 1


def decimal_at_most(bound: int) -> str:
    """A regular expression whose full matches are the decimal strings of
    ``0..bound``, leading zeros allowed, and the empty string.

    The ``Last-Event-ID`` header is a string, so the document bounds it with
    this pattern where the ``after`` query parameter has ``maximum``."""
    digits = str(bound)
    width = len(digits)
    alternatives = [f"[0-9]{{1,{width - 1}}}"] if width > 1 else []
    for i, digit in enumerate(digits):
        if digit == "0":
            continue
        lower = "0" if digit == "1" else f"[0-{int(digit) - 1}]"
        rest = width - i - 1
        alternatives.append(digits[:i] + lower + (f"[0-9]{{{rest}}}" if rest else ""))
    alternatives.append(digits)
    return f"^0*(?:{'|'.join(alternatives)})?$"


#: What the daemon takes in ``Last-Event-ID``.
LAST_EVENT_ID_PATTERN: Final = decimal_at_most(MAX_EVENT_ID)

_TYPES: tuple[Any, ...] = (
    RunRequest,
    RunInfo,
    RunDetail,
    RunPage,
    AgentList,
    McpAuthorizationList,
    ThreadCreate,
    ThreadInfo,
    ThreadPage,
    ApiError,
    ElicitationAnswer,
    ElicitationList,
    WebhookDeliveryList,
    Trajectory,
    list[TrajectorySummary],
    Event,
    ChatCompletionRequest,
    ChatCompletion,
    ChatCompletionChunk,
    ModelList,
    ModelCard,
    ErrorBody,
    ResponseRequest,
    ResponseObject,
    StreamEvent,
    ConversationCreate,
    ConversationObject,
    ConversationDeleted,
)


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


_KEY_REFUSALS: Final = {
    401: "Missing or wrong bearer token (the shared token or an API key)",
    403: "The API key lacks the scope this needs (`where`: `server.keys.NAME.scopes`)",
    429: "A limit was reached (`where` names it: the key's `rate_per_minute` or "
    "`max_active_runs`, or the daemon's); retry after `Retry-After` seconds",
}
"""What the ``Guard`` (and a key's run limit) may answer on any path behind the token."""


def _key_refusals() -> dict[str, Any]:
    """401, 403 and 429 on an OpenAI-compatible path: ``ApiError`` bodies
    from the ``Guard``, which answers before any route; a 429 may also come
    from the route (a run limit), in OpenAI's shape."""
    out = {str(c): _json(_ref("ApiError"), text) for c, text in _KEY_REFUSALS.items()}
    either = {"oneOf": [_ref("ApiError"), _ref("ErrorBody")]}
    out["429"] = _json(either, _KEY_REFUSALS[429])
    return out


def _errors(*codes: int) -> dict[str, Any]:
    """``ApiError`` responses; asking for 401 brings 403 and 429 along."""
    if 401 in codes:
        codes = (*codes, 403, 429)
    text = {
        **_KEY_REFUSALS,
        400: "Malformed request (bad JSON, an unknown field: `where` names it)",
        404: "No such run, rollout, agent or thread (or one of another API key)",
        409: "A conflict with the state it asks about (`where` names it): a thread with "
        "an unfinished run (one at a time), or an answer to a run that waits on no question",
        422: "Well-formed but invalid (the body says which field and why)",
        503: "Shutting down",
    }
    return {str(c): _json(_ref("ApiError"), text[c]) for c in codes}


def _run_id() -> dict[str, Any]:
    return {"name": "run_id", "in": "path", "required": True, "schema": {"type": "string"}}


def _thread_id() -> dict[str, Any]:
    return {"name": "thread_id", "in": "path", "required": True, "schema": {"type": "string"}}


def _thread_paths() -> dict[str, Any]:
    """``/v1/threads``: conversations held in the run store."""
    thread_links = {
        op: {
            "operationId": op,
            "parameters": {"thread_id": "$response.body#/thread_id"},
            "description": "The thread just created",
        }
        for op in ("getThread", "deleteThread")
    }
    return {
        "/v1/threads": {
            "post": {
                "operationId": "createThread",
                "summary": "Start a conversation (its runs see its earlier turns)",
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": _ref("ThreadCreate")}},
                },
                "responses": {
                    "201": {
                        **_json(_ref("ThreadInfo"), "The thread, empty"),
                        "links": thread_links,
                    },
                    **_errors(400, 401, 422),
                },
            },
            "get": {
                "operationId": "listThreads",
                "summary": "Threads, newest first (without their runs)",
                "parameters": [
                    {
                        "name": "limit",
                        "in": "query",
                        "schema": {"type": "integer", "minimum": 1, "maximum": 500, "default": 50},
                    }
                ],
                "responses": {
                    "200": _json(_ref("ThreadPage"), "Threads"),
                    **_errors(401, 422),
                },
            },
        },
        "/v1/threads/{thread_id}": {
            "get": {
                "operationId": "getThread",
                "parameters": [_thread_id()],
                "responses": {
                    "200": _json(_ref("ThreadInfo"), "The thread and its runs, oldest first"),
                    **_errors(401, 404),
                },
            },
            "delete": {
                "operationId": "deleteThread",
                "summary": "Forget the thread (its runs stay, as runs)",
                "parameters": [_thread_id()],
                "responses": {"204": {"description": "Deleted"}, **_errors(401, 404)},
            },
        },
        "/v1/threads/{thread_id}/runs": {
            "post": {
                "operationId": "createThreadRun",
                "summary": "The thread's next run: its task after the thread's earlier turns",
                "parameters": [_thread_id()],
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": _ref("ThreadRunBody")}},
                },
                "responses": {
                    "201": _json(_ref("RunInfo"), "The run, admitted"),
                    **_errors(400, 401, 404, 409, 422, 503),
                },
            }
        },
    }


def _conversation_id() -> dict[str, Any]:
    return {
        "name": "conversation_id",
        "in": "path",
        "required": True,
        "schema": {"type": "string"},
    }


def _openai_errors(*codes: int) -> dict[str, Any]:
    text = {
        400: "Malformed or invalid request (`error.param` names the field)",
        404: "No such model (models are agentrt agents), or no such previous response",
        409: "The run was cancelled before it answered, or the previous response did not complete",
        413: "The request body is too large",
        502: "The run failed (`error.run_id` names it; not retried by clients)",
        503: "Shutting down (the run resumes when the daemon restarts)",
    }
    return {str(c): _json(_ref("ErrorBody"), text[c]) for c in codes}


def _openai_paths(models: list[str]) -> dict[str, Any]:
    """``/v1/chat/completions`` and ``/v1/models``: OpenAI's shapes, plus
    agentrt's own request fields and the ``agentrt`` field of answers."""
    model = {"name": "model", "in": "path", "required": True, "schema": {"type": "string"}}
    if models:
        model["examples"] = {m: {"value": m} for m in models}
    # One SSE event: a chunk, an error (the run failed mid-stream), or [DONE].
    chunk_event = {
        "type": "object",
        "required": ["data"],
        "properties": {
            "data": {
                "anyOf": [
                    {"const": "[DONE]"},
                    {
                        "type": "string",
                        "contentMediaType": "application/json",
                        "contentSchema": {
                            "anyOf": [_ref("ChatCompletionChunk"), _ref("ErrorBody")]
                        },
                    },
                ]
            }
        },
    }
    response_event = {
        "type": "object",
        "required": ["event", "data"],
        "properties": {
            "event": {"type": "string"},
            "data": {
                "type": "string",
                "contentMediaType": "application/json",
                "contentSchema": _ref("ResponseStreamEvent"),
            },
        },
    }
    examples: dict[str, Any] = {}
    if models:
        question = {"role": "user", "content": "What is 17 * 23?"}
        examples["examples"] = {
            "question": {"value": {"model": models[0], "messages": [question]}},
            "scaled": {
                "value": {
                    "model": models[0],
                    "messages": [question],
                    "stream": True,
                    "agentrt": {"rollouts": 2, "aggregate": "majority"},
                }
            },
        }
    return {
        "/v1/chat/completions": {
            "post": {
                "operationId": "createChatCompletion",
                "summary": "Run an agent (the model `agentrt/<agent>`) on the messages",
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {"schema": _ref("ChatCompletionRequest"), **examples}
                    },
                },
                "responses": {
                    "200": {
                        "description": "The run's answer (with `stream`: chunks as "
                        "Server-Sent Events, progress as comments, then `[DONE]`)",
                        "content": {
                            "application/json": {"schema": _ref("ChatCompletion")},
                            "text/event-stream": {"schema": chunk_event},
                        },
                    },
                    **_key_refusals(),
                    **_openai_errors(400, 404, 409, 413, 502, 503),
                },
            }
        },
        "/v1/responses": {
            "post": {
                "operationId": "createResponse",
                "summary": "Run an agent (the model `agentrt/<agent>`) on the input "
                "(the Responses API)",
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": _ref("ResponseRequest")}},
                },
                "responses": {
                    "200": {
                        "description": "The run's answer as a Response (with `stream`: its "
                        "typed events as Server-Sent Events, `response.completed` or "
                        "`response.failed` last)",
                        "content": {
                            "application/json": {"schema": _ref("ResponseObject")},
                            "text/event-stream": {"schema": response_event},
                        },
                    },
                    **_key_refusals(),
                    **_openai_errors(400, 404, 409, 413, 502, 503),
                },
            }
        },
        "/v1/conversations": {
            "post": {
                "operationId": "createConversation",
                "summary": "Start a conversation for responses to join (a daemon thread)",
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": _ref("ConversationCreate")}},
                },
                "responses": {
                    "200": _json(_ref("ConversationObject"), "The conversation, empty"),
                    **_key_refusals(),
                    **_openai_errors(400, 413),
                },
            }
        },
        "/v1/conversations/{conversation_id}": {
            "get": {
                "operationId": "getConversation",
                "parameters": [_conversation_id()],
                "responses": {
                    "200": _json(_ref("ConversationObject"), "The conversation"),
                    **_key_refusals(),
                    **_openai_errors(404),
                },
            },
            "delete": {
                "operationId": "deleteConversation",
                "parameters": [_conversation_id()],
                "responses": {
                    "200": _json(_ref("ConversationDeleted"), "Deleted (its runs stay)"),
                    **_key_refusals(),
                    **_openai_errors(404),
                },
            },
        },
        "/v1/models": {
            "get": {
                "operationId": "listModels",
                "responses": {
                    "200": _json(_ref("ModelList"), "One model per agent"),
                    **_key_refusals(),
                },
            }
        },
        "/v1/models/{model}": {
            "get": {
                "operationId": "getModel",
                "parameters": [model],
                "responses": {
                    "200": _json(_ref("ModelCard"), "The agent as a model"),
                    **_key_refusals(),
                    **_openai_errors(404),
                },
            }
        },
    }


def _scaling(components: dict[str, Any], max_rollouts: int | None) -> None:
    """``RunRequestBody``: a ``RunRequest`` as the daemon takes it, its
    ``ScalingSpecBody`` at most ``max_rollouts`` rollouts and one variant
    per aggregator, its ``options`` that aggregator's configuration
    (without ``aggregate``: majority's), its ``RunOptionsBody`` without a
    conversation.  ``RunRequest`` stays what a run
    was asked with, as the daemon reports it."""
    spec = components["ScalingSpec"]
    common = dict(spec["properties"])
    if max_rollouts is not None:
        common["rollouts"] = {**common["rollouts"], "maximum": max_rollouts}
    common["confidence"] = {
        "anyOf": [
            {"type": "number", "exclusiveMinimum": 0.5, "exclusiveMaximum": 1},
            {"type": "null"},
        ],
        "default": None,
    }
    configs = TypeAdapter(AggregatorConfig).json_schema(ref_template="#/components/schemas/{model}")
    defs: dict[str, Any] = configs["$defs"]
    variants: list[dict[str, Any]] = []
    for name, ref in sorted(configs["discriminator"]["mapping"].items()):
        config = defs[ref.rsplit("/", 1)[1]]
        options = {
            "type": "object",
            "properties": {k: v for k, v in config["properties"].items() if k != "name"},
            "required": [k for k in config.get("required", []) if k != "name"],
            "additionalProperties": False,
        }
        variants.append(
            {
                "type": "object",
                "properties": {
                    **common,
                    "aggregate": {"const": name},
                    "options": options,
                },
                "required": [] if name == "majority" else ["aggregate"],
                "additionalProperties": False,
            }
        )
    for name, schema in defs.items():  # what the options refer to (JudgeConfig...)
        components.setdefault(name, schema)
    components["ScalingSpecBody"] = {
        "title": spec["title"],
        "description": spec["description"],
        "anyOf": variants,
    }
    run_options = dict(components["RunOptions"])
    run_options["properties"] = {
        **run_options["properties"],
        "conversation": {
            "type": "array",
            "maxItems": 0,
            "default": [],
            "description": "Empty here: a conversation reaches a run through "
            "/v1/chat/completions or /v1/responses (a 400 otherwise)",
        },
    }
    components["RunOptionsBody"] = run_options
    body = dict(components["RunRequest"])
    scaling = {**body["properties"]["scaling"], **_ref("ScalingSpecBody")}
    options = {**body["properties"]["options"], **_ref("RunOptionsBody")}
    body["properties"] = {**body["properties"], "scaling": scaling, "options": options}
    components["RunRequestBody"] = body


_NULL: dict[str, Any] = {"type": "null"}
_ONLY_NEUTRAL: dict[str, dict[str, Any]] = {
    "frequency_penalty": {"enum": [0, None]},
    "presence_penalty": {"enum": [0, None]},
    "logit_bias": {"anyOf": [_NULL, {"type": "object", "maxProperties": 0}]},
    "n": {"enum": [1, None]},
    "modalities": {"anyOf": [_NULL, {"const": ["text"]}]},
    "store": {"enum": [True, None]},
    "service_tier": {"enum": ["auto", "default", None]},
    "background": {"enum": [False, None]},
    "reasoning": {
        "anyOf": [_NULL, {"type": "object", "additionalProperties": _NULL}],
    },
    **dict.fromkeys(
        (
            "reasoning_effort",
            "verbosity",
            "audio",
            "prediction",
            "web_search_options",
            "functions",
            "function_call",
            "prompt_cache_retention",
            "prompt_cache_options",
            "prompt",
            "max_tool_calls",
            "context_management",
            "moderation",
            "access_programs",
            "background_options",
            "image",
        ),
        _NULL,
    ),
}
"""The OpenAI fields agentrt refuses unless they are left out or neutral:
what each may be (anything else is a 400 naming it)."""


def _openai_refusals(components: dict[str, Any]) -> None:
    """The OpenAI requests as agentrt takes them: neutral values only for
    what it refuses, function tools, logprobs the only
    thing a response may include."""
    chat_tool = components["ToolIn"]
    chat_tool["properties"].update(
        type={"const": "function"}, function=_ref("FunctionDefIn"), custom=_NULL
    )
    chat_tool["required"] = ["function", "type"]
    response_tool = components["FunctionToolIn"]
    response_tool["properties"].update(
        type={"const": "function"}, name={"type": "string", "minLength": 1, "maxLength": 64}
    )
    response_tool["required"] = ["name", "type"]
    components["ConversationCreate"]["properties"]["items"] = {
        "anyOf": [_NULL, {"type": "array", "maxItems": 0}],
        "default": None,
        "description": "Empty: a conversation starts with its first response",
    }
    components["ResponseRequest"]["properties"]["include"] = {
        "anyOf": [_NULL, {"type": "array", "items": {"const": LOGPROBS_INCLUDE}}],
        "default": None,
    }
    for request in ("ChatCompletionRequest", "ResponseRequest"):
        properties = components[request]["properties"]
        properties["tool_choice"] = {
            "anyOf": [
                {"enum": ["auto", "none", "required", None]},
                _ref("NamedToolChoice" if request == "ChatCompletionRequest" else "NamedChoice"),
            ],
            "default": None,
        }
        for name, allowed in _ONLY_NEUTRAL.items():
            if name in properties:
                properties[name] = {
                    **allowed,
                    "default": None,
                    "description": "Refused unless left out or neutral (agentrt does not "
                    "support it)",
                }


def openapi_document(
    *,
    version: str,
    token: bool,
    models: list[str] | None = None,
    max_rollouts: int | None = None,
    webhooks: bool = True,
    usd_caps: bool = True,
    agents: list[str] | None = None,
) -> dict[str, Any]:
    """The document served at ``/openapi.json`` (``webhooks``: whether runs
    may name a ``webhook``, which needs a signing secret; ``models``: the model names
    of the agents, given as examples; ``max_rollouts``: the daemon's limit
    on a run's rollouts; ``usd_caps``: whether it takes ``max_usd``, which
    needs model prices; ``agents``: the names a thread's run may give as
    its ``agent``)."""
    (schemas, components) = msgspec.json.schema_components(
        _TYPES, ref_template="#/components/schemas/{name}"
    )
    if models:
        for request in ("ChatCompletionRequest", "ResponseRequest"):
            components[request]["properties"]["model"]["examples"] = list(models)
    _scaling(components, max_rollouts)
    body = components["RunRequestBody"]
    webhook: dict[str, Any] = (
        {
            "anyOf": [
                {"type": "string", "pattern": WEBHOOK_URL_PATTERN, "maxLength": WEBHOOK_URL_MAX},
                {"type": "null"},
            ],
            "default": None,
        }
        if webhooks
        else {
            "type": "null",
            "description": "Refused: this daemon has no webhook secret to sign with",
            "default": None,
        }
    )
    body["properties"] = {**body["properties"], "webhook": webhook}
    _openai_refusals(components)
    if not usd_caps:
        components["Budget"]["properties"]["max_usd"] = {
            "type": "null",
            "description": "Refused: this daemon has no model prices to count USD with",
            "default": None,
        }
    thread_run = dict(components["RunRequestBody"])
    if agents:
        thread_run["properties"] = {
            **thread_run["properties"],
            "agent": {"enum": sorted({*agents, "default"}), "default": "default"},
        }
    components["ThreadRunBody"] = thread_run
    event_union = schemas[_TYPES.index(Event)]
    components["Event"] = event_union
    components["ResponseStreamEvent"] = schemas[_TYPES.index(StreamEvent)]
    trajectory_summaries = {"type": "array", "items": _ref("TrajectorySummary")}
    # In OpenAPI 3.1 the ``schema`` of ``text/event-stream`` describes one
    # event: a stored one (with its ``id``), a token event (never stored, no
    # ``id``) or the opening ``retry`` advice.
    data = {
        "type": "string",
        "contentMediaType": "application/json",
        "contentSchema": _ref("Event"),
    }
    sse_event = {
        "anyOf": [
            {
                "type": "object",
                "required": ["id", "event", "data"],
                "properties": {
                    "id": {"type": "string", "pattern": "^[0-9]+$"},
                    "event": {
                        "type": "string",
                        "enum": sorted(event_union["discriminator"]["mapping"]),
                    },
                    "data": data,
                },
            },
            {
                "type": "object",
                "required": ["event", "data"],
                "properties": {"event": {"const": "token"}, "data": data},
            },
            {
                "type": "object",
                "required": ["retry"],
                "properties": {"retry": {"type": "integer", "minimum": 0}},
            },
        ]
    }
    sse = {
        "description": "Server-Sent Events: `id` is the event's seq, `event` its type, "
        "`data` the event as JSON; resume with `Last-Event-ID` (or `?after=`).",
        "content": {"text/event-stream": {"schema": sse_event}},
    }
    event_id = {"type": "integer", "minimum": 0, "maximum": MAX_EVENT_ID}
    from_created = {
        "parameters": {"run_id": "$response.body#/run_id"},
        "description": "The run just created",
    }
    run_links = {
        "getRun": {"operationId": "getRun", **from_created},
        "cancelRun": {"operationId": "cancelRun", **from_created},
        "runEvents": {"operationId": "runEvents", **from_created},
        "runSummaries": {"operationId": "runSummaries", **from_created},
        "listWebhookDeliveries": {"operationId": "listWebhookDeliveries", **from_created},
    }
    paths: dict[str, Any] = {
        "/v1/runs": {
            "post": {
                "operationId": "createRun",
                "summary": "Start a run",
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": _ref("RunRequestBody")}},
                },
                "description": "With `Accept: text/event-stream` the answer is the run's "
                "events (as `GET /v1/runs/{run_id}/events` sends them), `Location` naming "
                "the run; else its `RunInfo`.",
                "responses": {
                    "201": {
                        "description": "The run, admitted",
                        "headers": {
                            "Location": {
                                "description": "The run (sent with the event stream)",
                                "schema": {"type": "string"},
                            }
                        },
                        "content": {
                            "application/json": {"schema": _ref("RunInfo")},
                            "text/event-stream": {"schema": sse_event},
                        },
                        "links": run_links,
                    },
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
                            "enum": [
                                "pending",
                                "running",
                                "waiting",
                                "succeeded",
                                "failed",
                                "cancelled",
                            ],
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
                        "schema": {"type": "string", "pattern": "^[0-9]{1,18}$"},
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
        "/v1/runs/{run_id}/elicitations/{question_id}": {
            "post": {
                "operationId": "answerElicitation",
                "description": "Answer the question the run asks the person behind it "
                "(the run's `elicitation` event with this `question_id`: an MCP server's, or "
                "the approval of a tool under `[approvals.TOOL]`; `decline` denies it). 409: "
                "the run waits on no question; 404: not on this one",
                "parameters": [
                    _run_id(),
                    {
                        "name": "question_id",
                        "in": "path",
                        "required": True,
                        "schema": {"type": "string"},
                    },
                ],
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": _ref("ElicitationAnswer")}},
                },
                "responses": {
                    "200": _json(_ref("RunInfo"), "The run the answer went to"),
                    **_errors(400, 401, 404, 409, 422),
                },
            }
        },
        "/v1/elicitations": {
            "get": {
                "operationId": "listElicitations",
                "summary": "Questions the caller's runs wait on (approvals among them)",
                "parameters": [
                    {
                        "name": "run_id",
                        "in": "query",
                        "description": "Only this run's",
                        "schema": {"type": "string"},
                    }
                ],
                "responses": {
                    "200": _json(_ref("ElicitationList"), "Waiting questions, oldest first"),
                    **_errors(401, 404),
                },
            }
        },
        "/v1/runs/{run_id}/webhook-deliveries": {
            "get": {
                "operationId": "listWebhookDeliveries",
                "summary": "The run's webhook deliveries, as recorded",
                "parameters": [_run_id()],
                "responses": {
                    "200": _json(_ref("WebhookDeliveryList"), "In the order they were made"),
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
                        "schema": {"type": "string", "pattern": LAST_EVENT_ID_PATTERN},
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
        **_thread_paths(),
        "/v1/agents": {
            "get": {
                "operationId": "listAgents",
                "responses": {"200": _json(_ref("AgentList"), "Agents"), **_errors(401)},
            }
        },
        "/v1/mcp/authorizations": {
            "get": {
                "operationId": "listMcpAuthorizations",
                "summary": "MCP servers waiting for a person to approve access (OAuth)",
                "responses": {
                    "200": _json(_ref("McpAuthorizationList"), "Pending approvals"),
                    **_errors(401),
                },
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
            "description": "Runs agents with inference-time scaling. The MCP endpoint "
            "(/mcp) follows its own specification.",
        },
        "paths": {**paths, **_openai_paths(list(models or []))},
        "components": {"schemas": components},
    }
    if token:
        doc["components"]["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
        doc["security"] = [{"bearer": []}]
    return doc


__all__ = ["LAST_EVENT_ID_PATTERN", "MAX_EVENT_ID", "decimal_at_most", "openapi_document"]
