"""``agentrt.tools``: the tool registry, Python-function tools, MCP client connections,
the MCP tool servers the runtime hosts, and the sandbox (with per-rollout
workspaces) that the shell, editor and Python tools run in.

Sits above the runtime floor (it may use actors and model types) and below
agents; it never imports agents or aggregators.
"""

from typing import TYPE_CHECKING, Any

from agentrt.runtime.kernel import _lazy_exports
from agentrt.tools._approval import ApprovalGate, ApprovalPolicy, ElicitationQuestion
from agentrt.tools._function import FunctionTool, to_tool_output, tool
from agentrt.tools._tool import (
    ClientPeer,
    NotificationSink,
    Tool,
    ToolContent,
    ToolContext,
    ToolOutput,
)
from agentrt.tools._tool_registry import (
    TOOL_NAME_PATTERN,
    ToolNameCollision,
    ToolRegistry,
    UnknownToolError,
)
from agentrt.tools._validation import ArgumentProblem, SchemaValidator, invalid_arguments
from agentrt.tools.builtins._calculator import Calculator, evaluate
from agentrt.tools.builtins._editor import EditorTool
from agentrt.tools.builtins._files import FileRoot, ListDirectoryTool, ReadFileTool, file_tools
from agentrt.tools.builtins._python_sandbox import PythonSandbox, PythonSandboxConfig
from agentrt.tools.builtins._shell import ShellTool
from agentrt.tools.sandbox._bwrap import Sandbox, SandboxConfig, SandboxResult, SandboxUnavailable
from agentrt.tools.sandbox._workspaces import (
    RolloutWorkspace,
    Workspaces,
    WorkspaceSeed,
    copy_directory_seed,
)

if TYPE_CHECKING:
    from agentrt.tools._memory_tools import memory_tools
    from agentrt.tools.hosting._calls import McpCallPeer
    from agentrt.tools.hosting._event_store import MemoryEventStore
    from agentrt.tools.hosting._hosted_catalog import (
        ListedResource,
        Prompt,
        PromptArgument,
        PromptMessage,
        ResourceTemplate,
        StaticResource,
    )
    from agentrt.tools.hosting._hosting_config import HttpServeConfig, LogLevel, ToolServerConfig
    from agentrt.tools.hosting._tool_server import ToolServer
    from agentrt.tools.hosting._transports import (
        HttpEndpoint,
        HttpMount,
        connect_in_process,
        loopback_security,
        serve_in_process,
        serve_stdio,
        serve_streamable_http,
        streamable_http_mount,
    )
    from agentrt.tools.mcp._auth import AuthorizationHandler, McpAuthorizationError
    from agentrt.tools.mcp._auth_config import McpAuthConfig
    from agentrt.tools.mcp._auth_store import FileTokenStore
    from agentrt.tools.mcp._connection import McpConnection
    from agentrt.tools.mcp._mcp_config import (
        ElicitationPolicy,
        HttpServerConfig,
        McpServerConfig,
        RestartPolicy,
        SamplingPolicy,
        StdioServerConfig,
        TaskPolicy,
    )
    from agentrt.tools.mcp._mcp_errors import McpServerError
    from agentrt.tools.mcp._mcp_tool import McpTool
    from agentrt.tools.mcp._server_actor import McpServerStatus, McpToolInfo
    from agentrt.tools.mcp._server_health import ConnectionState
    from agentrt.tools.mcp._server_requests import McpClientHooks, SamplingTarget

# MCP (client connections and the servers agentrt hosts) loads the MCP SDK,
# which most processes that use tools never need: those names load on first use.
_LAZY = {
    "AuthorizationHandler": "agentrt.tools.mcp._auth",
    "ConnectionState": "agentrt.tools.mcp._server_health",
    "ElicitationPolicy": "agentrt.tools.mcp._mcp_config",
    "FileTokenStore": "agentrt.tools.mcp._auth_store",
    "HttpEndpoint": "agentrt.tools.hosting._transports",
    "HttpMount": "agentrt.tools.hosting._transports",
    "HttpServeConfig": "agentrt.tools.hosting._hosting_config",
    "HttpServerConfig": "agentrt.tools.mcp._mcp_config",
    "ListedResource": "agentrt.tools.hosting._hosted_catalog",
    "LogLevel": "agentrt.tools.hosting._hosting_config",
    "McpAuthConfig": "agentrt.tools.mcp._auth_config",
    "McpAuthorizationError": "agentrt.tools.mcp._auth",
    "McpCallPeer": "agentrt.tools.hosting._calls",
    "McpClientHooks": "agentrt.tools.mcp._server_requests",
    "McpConnection": "agentrt.tools.mcp._connection",
    "McpServerConfig": "agentrt.tools.mcp._mcp_config",
    "McpServerError": "agentrt.tools.mcp._mcp_errors",
    "McpServerStatus": "agentrt.tools.mcp._server_actor",
    "McpTool": "agentrt.tools.mcp._mcp_tool",
    "McpToolInfo": "agentrt.tools.mcp._server_actor",
    "MemoryEventStore": "agentrt.tools.hosting._event_store",
    "Prompt": "agentrt.tools.hosting._hosted_catalog",
    "PromptArgument": "agentrt.tools.hosting._hosted_catalog",
    "PromptMessage": "agentrt.tools.hosting._hosted_catalog",
    "ResourceTemplate": "agentrt.tools.hosting._hosted_catalog",
    "RestartPolicy": "agentrt.tools.mcp._mcp_config",
    "SamplingPolicy": "agentrt.tools.mcp._mcp_config",
    "SamplingTarget": "agentrt.tools.mcp._server_requests",
    "StaticResource": "agentrt.tools.hosting._hosted_catalog",
    "StdioServerConfig": "agentrt.tools.mcp._mcp_config",
    "TaskPolicy": "agentrt.tools.mcp._mcp_config",
    "ToolServer": "agentrt.tools.hosting._tool_server",
    "ToolServerConfig": "agentrt.tools.hosting._hosting_config",
    "connect_in_process": "agentrt.tools.hosting._transports",
    "loopback_security": "agentrt.tools.hosting._transports",
    "memory_tools": "agentrt.tools._memory_tools",
    "serve_in_process": "agentrt.tools.hosting._transports",
    "serve_stdio": "agentrt.tools.hosting._transports",
    "serve_streamable_http": "agentrt.tools.hosting._transports",
    "streamable_http_mount": "agentrt.tools.hosting._transports",
}


def __getattr__(name: str) -> Any:
    return _lazy_exports.load(globals(), _LAZY, name)


__all__ = [
    "TOOL_NAME_PATTERN",
    "ApprovalGate",
    "ApprovalPolicy",
    "ArgumentProblem",
    "AuthorizationHandler",
    "Calculator",
    "ClientPeer",
    "ConnectionState",
    "EditorTool",
    "ElicitationPolicy",
    "ElicitationQuestion",
    "FileRoot",
    "FileTokenStore",
    "FunctionTool",
    "HttpEndpoint",
    "HttpMount",
    "HttpServeConfig",
    "HttpServerConfig",
    "ListDirectoryTool",
    "ListedResource",
    "LogLevel",
    "McpAuthConfig",
    "McpAuthorizationError",
    "McpCallPeer",
    "McpClientHooks",
    "McpConnection",
    "McpServerConfig",
    "McpServerError",
    "McpServerStatus",
    "McpTool",
    "McpToolInfo",
    "MemoryEventStore",
    "NotificationSink",
    "Prompt",
    "PromptArgument",
    "PromptMessage",
    "PythonSandbox",
    "PythonSandboxConfig",
    "ReadFileTool",
    "ResourceTemplate",
    "RestartPolicy",
    "RolloutWorkspace",
    "SamplingPolicy",
    "SamplingTarget",
    "Sandbox",
    "SandboxConfig",
    "SandboxResult",
    "SandboxUnavailable",
    "SchemaValidator",
    "ShellTool",
    "StaticResource",
    "StdioServerConfig",
    "TaskPolicy",
    "Tool",
    "ToolContent",
    "ToolContext",
    "ToolNameCollision",
    "ToolOutput",
    "ToolRegistry",
    "ToolServer",
    "ToolServerConfig",
    "UnknownToolError",
    "WorkspaceSeed",
    "Workspaces",
    "connect_in_process",
    "copy_directory_seed",
    "evaluate",
    "file_tools",
    "invalid_arguments",
    "loopback_security",
    "memory_tools",
    "serve_in_process",
    "serve_stdio",
    "serve_streamable_http",
    "streamable_http_mount",
    "to_tool_output",
    "tool",
]
