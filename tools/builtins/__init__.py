"""Built-in tools: a safe calculator, file reading confined to a root
directory, and the sandboxed ones: Python, shell and editor.

Imports the runtime floor and the tools layer; never agents or aggregators.
"""

from agentrt.tools.builtins.calculator import Calculator, evaluate
from agentrt.tools.builtins.editor import EditorTool
from agentrt.tools.builtins.files import FileRoot, ListDirectoryTool, ReadFileTool, file_tools
from agentrt.tools.builtins.python_sandbox import PythonSandbox, PythonSandboxConfig
from agentrt.tools.builtins.shell import ShellTool

__all__ = [
    "Calculator",
    "EditorTool",
    "FileRoot",
    "ListDirectoryTool",
    "PythonSandbox",
    "PythonSandboxConfig",
    "ReadFileTool",
    "ShellTool",
    "evaluate",
    "file_tools",
]
