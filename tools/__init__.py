"""Tools: the tool registry, Python-function tools, MCP client connections and
the MCP tool servers the runtime hosts.

Sits above the runtime floor (it may use actors and model types) and below
agents; it never imports agents or aggregators.
"""

from agentrt.tools.base import NotificationSink, Tool, ToolContent, ToolContext, ToolOutput
from agentrt.tools.builtins import (
    Calculator,
    FileRoot,
    ListDirectoryTool,
    PythonSandbox,
    PythonSandboxConfig,
    ReadFileTool,
    SandboxResult,
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
from agentrt.tools.validation import ArgumentProblem, SchemaValidator, invalid_arguments

__all__ = [
    "TOOL_NAME_PATTERN",
    "ArgumentProblem",
    "Calculator",
    "FileRoot",
    "FunctionTool",
    "ListDirectoryTool",
    "NotificationSink",
    "PythonSandbox",
    "PythonSandboxConfig",
    "ReadFileTool",
    "SandboxResult",
    "SchemaValidator",
    "Tool",
    "ToolContent",
    "ToolContext",
    "ToolNameCollision",
    "ToolOutput",
    "ToolRegistry",
    "UnknownToolError",
    "evaluate",
    "file_tools",
    "invalid_arguments",
    "to_tool_output",
    "tool",
]
