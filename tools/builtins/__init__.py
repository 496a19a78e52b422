"""Built-in tools: a safe calculator, a Python sandbox, file reading confined
to a root directory.

Imports the runtime floor and the tools layer; never agents or aggregators.
"""

from agentrt.tools.builtins.calculator import Calculator, evaluate
from agentrt.tools.builtins.files import FileRoot, ListDirectoryTool, ReadFileTool, file_tools
from agentrt.tools.builtins.python_sandbox import (
    PythonSandbox,
    PythonSandboxConfig,
    SandboxResult,
)

__all__ = [
    "Calculator",
    "FileRoot",
    "ListDirectoryTool",
    "PythonSandbox",
    "PythonSandboxConfig",
    "ReadFileTool",
    "SandboxResult",
    "evaluate",
    "file_tools",
]
