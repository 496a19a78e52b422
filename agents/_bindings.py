"""Tool bindings of a spec -> ``Tool`` objects: built-in names, Python bindings
``"pkg.mod:fn"`` and MCP servers.

May import tools and the spec models; never aggregators or the roof.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.machinery
import importlib.util
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentrt.agents._spec import BuiltinTool, McpTools, PythonTool
from agentrt.runtime.kernel._errors import ConfigError
from agentrt.tools._function import FunctionTool
from agentrt.tools._tool import Tool
from agentrt.tools.builtins._calculator import Calculator
from agentrt.tools.builtins._editor import EditorTool
from agentrt.tools.builtins._files import ListDirectoryTool, ReadFileTool
from agentrt.tools.builtins._python_sandbox import PythonSandbox, PythonSandboxConfig
from agentrt.tools.builtins._shell import ShellTool
from agentrt.tools.sandbox._bwrap import SandboxConfig
from agentrt.tools.sandbox._workspaces import Workspaces

if TYPE_CHECKING:  # the MCP SDK loads when a connection opens, not with the agents
    from agentrt.tools.mcp._servers import McpToolSource

Binding = BuiltinTool | PythonTool | McpTools


def resolve_binding(
    binding: Binding,
    *,
    base_dir: Path,
    where: str,
    mcp: McpToolSource | None = None,
    tool_timeout_s: float | None = None,
) -> list[Tool]:
    """The tools ``binding`` stands for (``where``: its place in the spec;
    ``tool_timeout_s``: the agent's, the sandboxed commands' default limit)."""
    if isinstance(binding, BuiltinTool):
        return [
            builtin_tool(binding, base_dir=base_dir, where=where, tool_timeout_s=tool_timeout_s)
        ]
    if isinstance(binding, PythonTool):
        return [python_tool(binding, base_dir=base_dir, where=where)]
    return mcp_tools(binding, mcp, where=where)


def builtin_tool(
    binding: BuiltinTool, *, base_dir: Path, where: str, tool_timeout_s: float | None = None
) -> Tool:
    """One built-in tool: ``calculator``, ``python`` (``PythonSandbox``, a
    fresh directory per call), ``shell``/``editor`` (``ShellTool``,
    ``EditorTool``: the rollout's directory under ``Workspaces()``'s default
    root, shared by the two), or
    ``read_file``/``list_directory`` confined to ``root`` (relative to
    ``base_dir``, the spec file's directory; default: that directory).
    A sandboxed command's limit is the binding's ``timeout_s``, else
    ``tool_timeout_s`` (the agent's), else the sandbox's default."""
    name = binding.name or binding.builtin
    timeout = binding.timeout_s or (min(tool_timeout_s, 3600.0) if tool_timeout_s else None)
    sandboxed: dict[str, Any] = {
        "network": binding.network,
        "read_only_paths": binding.read_only_paths,
        **({"timeout_s": timeout} if timeout is not None else {}),
    }
    match binding.builtin:
        case "calculator":
            return Calculator(name=name)
        case "python":
            return PythonSandbox(PythonSandboxConfig(**sandboxed), name=name)
        case "shell":
            return ShellTool(Workspaces(), SandboxConfig(**sandboxed), name=name)
        case "editor":
            return EditorTool(Workspaces(), name=name)
        case "read_file" | "list_directory":
            root = base_dir / (binding.root or ".")
            try:
                if binding.builtin == "read_file":
                    return ReadFileTool(root, name=name)
                return ListDirectoryTool(root, name=name)
            except ConfigError as exc:
                raise ConfigError(f"root {str(root)!r}: {exc}", where=where) from exc


def python_tool(binding: PythonTool, *, base_dir: Path | None, where: str) -> Tool:
    """The tool a ``"pkg.mod:fn"`` binding names: a ``Tool`` object as it
    is, a callable as a ``FunctionTool`` (described by its type hints and
    docstring)."""
    target = import_target(binding.python, base_dir=base_dir, where=where)
    if isinstance(target, Tool) and not isinstance(target, type):
        if binding.name is not None or binding.description is not None:
            raise ConfigError(
                f"{binding.python!r} is already a tool ({target.spec.name!r}); set its name "
                "and description where it is defined, not here",
                where=where,
            )
        return target
    if isinstance(target, type) and isinstance(target, Tool):
        raise ConfigError(
            f"{binding.python!r} is a tool class; bind an instance of it (or a function)",
            where=where,
        )
    if not callable(target):
        raise ConfigError(
            f"{binding.python!r} is a {type(target).__name__}, neither a tool nor a function",
            where=where,
        )
    try:
        return FunctionTool.from_callable(
            target, name=binding.name, description=binding.description
        )
    except ConfigError as exc:
        raise ConfigError(f"{binding.python!r} cannot be a tool: {exc}", where=where) from exc


def import_target(target: str, *, base_dir: Path | None, where: str) -> Any:
    """Import ``module:attribute`` (a module not on ``sys.path`` is looked
    for in ``base_dir``; dots in the attribute walk into it).  Raises a
    ``ConfigError`` at ``where`` saying why: the module is missing,
    importing it raised (type and message), the attribute is absent (with
    the closest names)."""
    module_name, _, attribute = target.partition(":")
    module = _import_module(module_name, target, base_dir=base_dir, where=where)
    found: Any = module
    walked = module_name
    for part in attribute.split("."):
        if not hasattr(found, part):
            names = [n for n in dir(found) if not n.startswith("_")]
            close = difflib.get_close_matches(part, names, n=3)
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            raise ConfigError(
                f"tool binding {target!r}: {walked} has no attribute {part!r}{hint}", where=where
            )
        found = getattr(found, part)
        walked = f"{walked}.{part}"
    return found


def _import_module(name: str, target: str, *, base_dir: Path | None, where: str) -> Any:
    try:
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError as exc:
            top = name.split(".", 1)[0]
            if exc.name == top and base_dir is not None and _load_beside(top, base_dir):
                return importlib.import_module(name)
            raise
    except ModuleNotFoundError as exc:
        looked = f" or next to the spec in {base_dir}" if base_dir is not None else ""
        raise ConfigError(
            f"tool binding {target!r} does not import: {exc} (not on sys.path{looked}; "
            "is the package installed?)",
            where=where,
        ) from exc
    except Exception as exc:  # the module's own code failed while importing
        raise ConfigError(
            f"tool binding {target!r} does not import: importing {name!r} raised "
            f"{type(exc).__name__}: {exc}",
            where=where,
        ) from exc


def _load_beside(top: str, base_dir: Path) -> bool:
    """Import the top-level module ``top`` from ``base_dir`` (a module file
    or a package there), registering it like any import; False if absent."""
    found = importlib.machinery.PathFinder.find_spec(top, [str(base_dir)])
    if found is None or found.loader is None:
        return False
    module = importlib.util.module_from_spec(found)
    sys.modules[top] = module
    try:
        found.loader.exec_module(module)
    except BaseException:
        del sys.modules[top]
        raise
    return True


def mcp_tools(binding: McpTools, toolbox: McpToolSource | None, *, where: str) -> list[Tool]:
    """The tools of the binding's server, as its open connection offers them
    (none when the server could not be started: the toolbox reports it)."""
    server = binding.server_name
    if toolbox is None:
        raise ConfigError(f"MCP server {server!r} is not open", where=where)
    connection = toolbox.connections.get(server)
    if connection is None:
        return []
    offered = connection.tools()
    if binding.tools is None:
        return list(offered)
    by_remote = {t.remote_name: t for t in offered}
    missing = [n for n in binding.tools if n not in by_remote]
    if missing:
        raise ConfigError(
            f"MCP server {server!r} offers no tool {missing[0]!r} "
            f"(offered: {', '.join(sorted(by_remote)) or 'none'})",
            where=where,
        )
    return [by_remote[n] for n in binding.tools]


__all__ = [
    "Binding",
    "builtin_tool",
    "import_target",
    "mcp_tools",
    "python_tool",
    "resolve_binding",
]
