"""Loading a hierarchy of spec files: ``load_spec`` -> ``SpecSet`` (its files,
units, references and MCP servers; ``build_order`` is the order
``agents.hierarchy`` builds the units in).

Reads files; builds nothing.  May import the rest of ``agentrt.agents``'
spec modules and configuration; never aggregators or the roof.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from pydantic import TypeAdapter, ValidationError

from agentrt.agents._spec import (
    NAME_PATTERN,
    UNION_TAGS,
    AgentSpec,
    McpServers,
    McpTools,
    MultiFile,
    UnitSpec,
)
from agentrt.agents._spec_yaml import Loc, SpecError, SpecProblem, locate, parse_yaml, problems_from
from agentrt.tools.mcp._mcp_config import McpServerConfig

if TYPE_CHECKING:
    import yaml

_unit_adapter: Final[TypeAdapter[Any]] = TypeAdapter(UnitSpec)
_servers_adapter: Final[TypeAdapter[dict[str, McpServerConfig]]] = TypeAdapter(McpServers)

#: Suffixes that make a reference a file path rather than a name.
SPEC_SUFFIXES: Final = (".yaml", ".yml")


@dataclass(frozen=True, slots=True)
class UnitRef:
    """One unit of a hierarchy: a file (resolved path) and a name in it."""

    file: Path
    name: str


@dataclass(frozen=True, slots=True)
class Edge:
    """A reference from one unit to another (a sub-agent or a stage)."""

    target: UnitRef
    loc: Loc
    """Where the reference sits, relative to the referring unit."""
    budget_share: float | None = None
    """The referring side's override of the target's budget share."""
    description: str | None = None
    """The referring side's description of the target."""


@dataclass(frozen=True)
class SpecFile:
    """One parsed, validated spec file."""

    path: Path
    """As shown in messages (relative, as the user or a reference gave it)."""
    key: Path
    """The resolved path: a file's identity."""
    units: dict[str, Any]
    """``AgentSpec`` or ``PipelineSpec`` by (effective) name, in file order."""
    entry: str
    multi: bool
    mcp_servers: dict[str, McpServerConfig]
    root: yaml.Node | None = field(default=None, repr=False)

    @property
    def base_dir(self) -> Path:
        """What relative paths in this file are relative to."""
        return self.path.parent

    def unit_loc(self, name: str) -> Loc:
        return ("agents", name) if self.multi else ()

    def problem(self, loc: Loc, message: str) -> SpecProblem:
        line, key = locate(self.root, loc, skip=UNION_TAGS)
        return SpecProblem(str(self.path), line, key, message)

    def error(self, loc: Loc, message: str) -> SpecError:
        return SpecError([self.problem(loc, message)])

    def where(self, loc: Loc) -> str:
        return self.problem(loc, "").where


@dataclass(frozen=True)
class SpecSet:
    """A loaded hierarchy: its files, units, references and MCP servers."""

    root: UnitRef
    files: dict[Path, SpecFile]
    edges: dict[UnitRef, list[Edge]]
    servers: dict[str, McpServerConfig]
    """Every MCP server any loaded file defines (names are global)."""

    @classmethod
    def single(cls, unit: AgentSpec, *, label: str = "<default agent>") -> SpecSet:
        """A one-agent set not read from a file (relative paths: the cwd)."""
        name = unit.name or "agent"
        key = Path(label)
        spec_file = SpecFile(
            path=key, key=key, units={name: unit}, entry=name, multi=False, mcp_servers={}
        )
        ref = UnitRef(key, name)
        return cls(root=ref, files={key: spec_file}, edges={ref: []}, servers={})

    def unit(self, ref: UnitRef) -> Any:
        """The ``AgentSpec`` or ``PipelineSpec`` of ``ref``."""
        return self.files[ref.file].units[ref.name]

    def file(self, ref: UnitRef) -> SpecFile:
        return self.files[ref.file]

    def where(self, ref: UnitRef, loc: Loc = ()) -> str:
        """``file:line: key`` of ``loc`` inside the unit ``ref``."""
        spec_file = self.files[ref.file]
        return spec_file.where((*spec_file.unit_loc(ref.name), *loc))

    def error(self, ref: UnitRef, loc: Loc, message: str) -> SpecError:
        spec_file = self.files[ref.file]
        return spec_file.error((*spec_file.unit_loc(ref.name), *loc), message)

    def build_order(self) -> list[UnitRef]:
        """Units reachable from the root, every callee before its callers."""
        order: list[UnitRef] = []
        done: set[UnitRef] = set()

        def visit(ref: UnitRef) -> None:
            if ref in done:
                return
            done.add(ref)
            for edge in self.edges[ref]:
                visit(edge.target)
            order.append(ref)

        visit(self.root)
        return order


def load_spec(
    path: str | os.PathLike[str],
    *,
    entry: str | None = None,
    servers: Mapping[str, McpServerConfig] | None = None,
) -> SpecSet:
    """Load the spec file at ``path`` (``file.yaml#name`` picks the entry)
    and every file it references, each once, paths relative to the
    referring file.  Every problem -- YAML syntax, duplicate or unknown keys,
    invalid values, references to agents, files or MCP servers that do not
    exist, one MCP server name given two different settings, cycles of
    references -- is a ``SpecError`` naming the file, the line and the key
    path.
    ``servers``: MCP servers defined outside the files (``[mcp]`` in
    ``agentrt.toml``) that agents may name in ``tools: [{mcp: name}]``; a
    file's own ``mcp_servers`` come first."""
    outside = dict(servers or {})
    text = os.fspath(path)
    if entry is None and "#" in text and not Path(text).exists():
        text, entry = text.rsplit("#", 1)
    first = _load_file(Path(text), outside)
    files = {first.key: first}
    edges: dict[UnitRef, list[Edge]] = {}
    pending = [first]
    while pending:
        spec_file = pending.pop()
        for name, unit in spec_file.units.items():
            ref = UnitRef(spec_file.key, name)
            edges[ref] = []
            for loc, target, share, description in _references(unit):
                where = (*spec_file.unit_loc(name), *loc)
                target_file = _target_file(
                    spec_file, target, where, files, pending, outside=outside
                )
                target_ref = _target_unit(spec_file, target_file, target, where)
                edges[ref].append(Edge(target_ref, loc, share, description))
    root_name = entry or first.entry
    if root_name not in first.units:
        raise SpecError.one(
            first.path,
            f"no agent named {root_name!r} (defined: {', '.join(first.units)})",
            key="entry",
        )
    specs = SpecSet(
        root=UnitRef(first.key, root_name),
        files=files,
        edges=edges,
        servers=_servers(files.values(), outside),
    )
    _check_cycles(specs)
    return specs


# -- one file ---------------------------------------------------------------------


def _load_file(path: Path, outside: Mapping[str, McpServerConfig]) -> SpecFile:
    shown = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise SpecError.one(shown, f"cannot read the spec file: {reason}") from None
    data, root = parse_yaml(text, shown)
    if data is None:
        raise SpecError.one(shown, "the spec file is empty", line=1)
    if not isinstance(data, Mapping):
        raise SpecError.one(
            shown,
            f"a spec is a mapping (keys: name, instructions, tools, ... or agents), "
            f"not a {type(data).__name__}",
            line=1,
        )
    if "agents" in data:
        try:
            multi = MultiFile.model_validate(data)
        except ValidationError as exc:
            raise SpecError(problems_from(exc, shown, root, skip=UNION_TAGS)) from None
        units = dict(multi.agents)
        servers = dict(multi.mcp_servers)
        entry = multi.entry if multi.entry in units else next(iter(units))
        spec_file = SpecFile(path, path.resolve(), units, entry, True, servers, root)
        found = multi.problems()
    else:
        spec_file = _load_single(path, data, root)
        found = []
    for name, unit in spec_file.units.items():
        found += [((*spec_file.unit_loc(name), *loc), text) for loc, text in unit.problems()]
    if found:
        raise SpecError([spec_file.problem(loc, text) for loc, text in found])
    _check_mcp_names(spec_file, outside)
    return spec_file


def _load_single(path: Path, data: Mapping[Any, Any], root: yaml.Node | None) -> SpecFile:
    shown = str(path)
    body = {k: v for k, v in data.items() if k != "mcp_servers"}
    problems: list[SpecProblem] = []
    unit: Any = None
    servers: dict[str, McpServerConfig] = {}
    try:
        unit = _unit_adapter.validate_python(body)
    except ValidationError as exc:
        problems += problems_from(exc, shown, root, skip=UNION_TAGS)
    try:
        servers = dict(_servers_adapter.validate_python(data.get("mcp_servers", {})))
    except ValidationError as exc:
        problems += problems_from(exc, shown, root, prefix=("mcp_servers",), skip=UNION_TAGS)
    if problems:
        raise SpecError(problems)
    name = unit.name or path.stem
    if not re.match(NAME_PATTERN, name):
        raise SpecError.one(
            shown,
            f"the file name {path.stem!r} is not a valid agent name; set `name:` "
            "(1-64 letters, digits, '_' or '-')",
            line=1,
        )
    return SpecFile(path, path.resolve(), {name: unit}, name, False, servers, root)


def _check_mcp_names(spec_file: SpecFile, outside: Mapping[str, McpServerConfig]) -> None:
    for name, unit in spec_file.units.items():
        if not isinstance(unit, AgentSpec):
            continue
        named: list[tuple[Loc, str]] = [
            ((*spec_file.unit_loc(name), "tools", index, "mcp"), binding.mcp)
            for index, binding in enumerate(unit.tools)
            if isinstance(binding, McpTools) and isinstance(binding.mcp, str)
        ]
        named += [
            ((*spec_file.unit_loc(name), "resources", index, "mcp"), attached.mcp)
            for index, attached in enumerate(unit.resources)
        ]
        if unit.prompt is not None:
            named.append(((*spec_file.unit_loc(name), "prompt", "mcp"), unit.prompt.mcp))
        for loc, server in named:
            if server not in spec_file.mcp_servers and server not in outside:
                defined = ", ".join(spec_file.mcp_servers) or "none"
                configured = ", ".join(outside) or "none"
                raise spec_file.error(
                    loc,
                    f"no MCP server named {server!r} in this file's `mcp_servers` "
                    f"(defined: {defined}) or the configuration's [mcp] (configured: "
                    f"{configured})",
                )


def _references(unit: Any) -> Iterator[tuple[Loc, str, float | None, str | None]]:
    """(location, reference, budget share, description) of each callee."""
    if isinstance(unit, AgentSpec):
        for index, sub in enumerate(unit.sub_agents):
            yield ("sub_agents", index), sub.agent, sub.budget_share, sub.description
    else:
        for index, stage in enumerate(unit.stages):
            yield ("stages", index, "agent"), stage.agent, stage.budget_share, None


# -- references across files ----------------------------------------------------------


def _is_path(reference: str) -> bool:
    return reference.split("#", 1)[0].endswith(SPEC_SUFFIXES)


def _target_file(
    spec_file: SpecFile,
    reference: str,
    where: Loc,
    files: dict[Path, SpecFile],
    pending: list[SpecFile],
    *,
    outside: Mapping[str, McpServerConfig],
) -> SpecFile:
    if not _is_path(reference):
        if reference not in spec_file.units:
            raise spec_file.error(
                where,
                f"no agent named {reference!r} in this file (defined: "
                f"{', '.join(spec_file.units)}); a file reference ends in .yaml",
            )
        return spec_file
    relative = reference.split("#", 1)[0]
    path = Path(os.path.normpath(spec_file.base_dir / relative))
    key = path.resolve()
    if key in files:
        return files[key]
    if not path.is_file():
        raise spec_file.error(where, f"spec file {relative!r} not found (looked for {path})")
    loaded = _load_file(path, outside)
    files[key] = loaded
    pending.append(loaded)
    return loaded


def _target_unit(spec_file: SpecFile, target: SpecFile, reference: str, where: Loc) -> UnitRef:
    if target is spec_file and not _is_path(reference):
        return UnitRef(target.key, reference)
    name = reference.split("#", 1)[1] if "#" in reference else target.entry
    if name not in target.units:
        raise spec_file.error(
            where, f"{target.path} defines no agent {name!r} (defined: {', '.join(target.units)})"
        )
    return UnitRef(target.key, name)


def _servers(files: Any, outside: Mapping[str, McpServerConfig]) -> dict[str, McpServerConfig]:
    """Every file's MCP servers, plus the inline ones and those of ``outside``
    the agents name; a name given two different settings is an error."""
    merged: dict[str, tuple[McpServerConfig, str]] = {}

    def add(server: McpServerConfig, spec_file: SpecFile, loc: Loc) -> None:
        seen = merged.get(server.name)
        if seen is None:
            merged[server.name] = (server, spec_file.where(loc))
        elif seen[0] != server:
            raise spec_file.error(
                loc,
                f"MCP server {server.name!r} is also defined, with other settings, at {seen[1]}",
            )

    for spec_file in files:
        for name, server in spec_file.mcp_servers.items():
            add(server, spec_file, ("mcp_servers", name))
        for unit_name, unit in spec_file.units.items():
            if isinstance(unit, AgentSpec):
                for index, binding in enumerate(unit.tools):
                    if isinstance(binding, McpTools) and not isinstance(binding.mcp, str):
                        loc = (*spec_file.unit_loc(unit_name), "tools", index, "mcp")
                        add(binding.mcp, spec_file, loc)
    for spec_file in files:
        for unit in spec_file.units.values():
            if not isinstance(unit, AgentSpec):
                continue
            names = [b.mcp for b in unit.tools if isinstance(b, McpTools)]
            names += unit.mcp_context_servers()
            for named in names:
                if isinstance(named, str) and named not in merged and named in outside:
                    merged[named] = (outside[named], "the configuration's [mcp]")
    return {name: server for name, (server, _) in merged.items()}


def _check_cycles(specs: SpecSet) -> None:
    """No unit may (transitively) call itself."""
    state: dict[UnitRef, int] = {}  # 1: on the stack, 2: done
    stack: list[UnitRef] = []
    one_file = len(specs.files) == 1

    def label(ref: UnitRef) -> str:
        return ref.name if one_file else f"{specs.files[ref.file].path}#{ref.name}"

    def visit(ref: UnitRef) -> None:
        state[ref] = 1
        stack.append(ref)
        for edge in specs.edges[ref]:
            mark = state.get(edge.target)
            if mark == 1:
                cycle = [*stack[stack.index(edge.target) :], edge.target]
                raise specs.error(
                    ref,
                    edge.loc,
                    "sub-agent cycle: " + " -> ".join(label(r) for r in cycle),
                )
            if mark is None:
                visit(edge.target)
        stack.pop()
        state[ref] = 2

    for ref in specs.edges:
        if ref not in state:
            visit(ref)


__all__ = ["SPEC_SUFFIXES", "Edge", "SpecFile", "SpecSet", "UnitRef", "load_spec"]
