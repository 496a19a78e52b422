"""Tools: the tool registry, Python-function tools, MCP client connections,
the MCP tool servers the runtime hosts, and the sandbox (with per-rollout
workspaces) that the shell, editor and Python tools run in.

Sits above the runtime floor (it may use actors and model types) and below
agents; it never imports agents or aggregators.
"""

from agentrt.tools.base import NotificationSink, Tool, ToolContent, ToolContext, ToolOutput
from agentrt.tools.builtins import (
    Calculator,
    EditorTool,
    FileRoot,
    ListDirectoryTool,
    PythonSandbox,
    PythonSandboxConfig,
    ReadFileTool,
    ShellTool,
    evaluate,
    file_tools,
)
from agentrt.tools.function import FunctionTool, to_tool_output, tool
from agentrt.tools.registry import (
    TOOL_NAME_PATTERN,
    ToolNameCollision,
    ToolRegistry,
    UnknownToolError,
)
from agentrt.tools.sandbox import Sandbox, SandboxConfig, SandboxResult, SandboxUnavailable
from agentrt.tools.sandbox_workspace import (
    RolloutWorkspace,
    Workspaces,
    WorkspaceSeed,
    copy_directory_seed,
)
from agentrt.tools.validation import ArgumentProblem, SchemaValidator, invalid_arguments

__all__ = [
    "TOOL_NAME_PATTERN",
    "ArgumentProblem",
    "Calculator",
    "EditorTool",
    "FileRoot",
    "FunctionTool",
    "ListDirectoryTool",
    "NotificationSink",
    "PythonSandbox",
    "PythonSandboxConfig",
    "ReadFileTool",
    "RolloutWorkspace",
    "Sandbox",
    "SandboxConfig",
    "SandboxResult",
    "SandboxUnavailable",
    "SchemaValidator",
    "ShellTool",
    "Tool",
    "ToolContent",
    "ToolContext",
    "ToolNameCollision",
    "ToolOutput",
    "ToolRegistry",
    "UnknownToolError",
    "WorkspaceSeed",
    "Workspaces",
    "copy_directory_seed",
    "evaluate",
    "file_tools",
    "invalid_arguments",
    "to_tool_output",
    "tool",
]
