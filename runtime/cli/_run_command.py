"""What ``agentrt run`` and ``agentrt eval`` run: the agent the command line
names, on the one engine (``agentrt.runtime.engine.Runtime``).

Owns ``agent_specs`` (``--agent`` as a spec file, ``x.yaml`` or
``x.yaml#name``, or a name from the configuration's ``[agents]``, else the
default agent: short instructions, the calculator, small limits; with the
command line's overrides: steps, tokens, temperature, ``--mcp`` servers)
and ``open_runtime`` (a ``Runtime`` from ``agentrt.toml`` with that agent as
``CLI_AGENT``).  Must not print: the CLI's output layer does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

from agentrt.agents._spec import AgentSpec, McpTools, default_agent
from agentrt.agents._spec_loader import SPEC_SUFFIXES, SpecSet, load_spec
from agentrt.runtime.config._config_file import AgentrtConfig
from agentrt.runtime.engine._runtime import Runtime
from agentrt.runtime.kernel._errors import ConfigError
from agentrt.tools.mcp._mcp_config import parse_server_spec

__all__ = ["CLI_AGENT", "agent_specs", "eval_runner", "open_runtime"]

CLI_AGENT: Final = "cli"
"""The name the command line's agent runs under."""


def agent_specs(
    agent: str | None,
    config: AgentrtConfig,
    *,
    max_steps: int | None = None,
    max_tokens: int | None = None,
    temperature: float | None = None,
    mcp: tuple[str, ...] = (),
) -> SpecSet | str:
    """The hierarchy ``--agent`` names (see the module docstring); the
    overrides apply to every agent of it, ``mcp`` servers to its entry.  An
    agent configured inline in ``[agents]`` is returned by name."""
    if agent is None:
        limits: dict[str, Any] = {}
        if max_steps is not None:
            limits["max_steps"] = max_steps
        if max_tokens is not None:
            limits["max_tokens_per_step"] = max_tokens
        specs = SpecSet.single(default_agent(**limits))
    elif agent.split("#", 1)[0].endswith(SPEC_SUFFIXES) or Path(agent).is_file():
        specs = load_spec(agent, servers=config.runtime.mcp)
    elif agent in config.runtime.agents:
        entry = config.runtime.agents[agent]
        if not isinstance(entry, str):
            if (max_steps, max_tokens, temperature) != (None, None, None) or mcp:
                raise ConfigError(
                    f"agent {agent!r} is configured inline; change its limits, temperature "
                    "and tools in the configuration (the flags apply to spec files)",
                    where=f"--agent ({config.source})",
                )
            return agent
        specs = load_spec(entry, servers=config.runtime.mcp)
    else:
        known = ", ".join(sorted(config.runtime.agents)) or "none"
        raise ConfigError(
            f"no agent named {agent!r} in the configuration's [agents] (known: {known}), "
            "and it is no spec file (those end in .yaml)",
            where=f"--agent ({config.source})",
        )
    return _override(specs, max_steps, max_tokens, temperature, mcp)


def _override(
    specs: SpecSet,
    max_steps: int | None,
    max_tokens: int | None,
    temperature: float | None,
    mcp: tuple[str, ...],
) -> SpecSet:
    limits: dict[str, Any] = {}
    if max_steps is not None:
        limits["max_steps"] = max_steps
    if max_tokens is not None:
        limits["max_tokens_per_step"] = max_tokens
    servers = [parse_server_spec(text) for text in mcp]
    root = specs.unit(specs.root)
    if servers and not isinstance(root, AgentSpec):
        raise ConfigError("--mcp gives tools to an agent; the entry is a pipeline", where="--mcp")
    files = {}
    for key, spec_file in specs.files.items():
        units = {}
        for name, unit in spec_file.units.items():
            if not isinstance(unit, AgentSpec):
                units[name] = unit
                continue
            update: dict[str, Any] = {}
            if limits:
                update["limits"] = unit.limits.model_copy(update=limits)
            if temperature is not None:
                update["temperature"] = temperature
            if servers and key == specs.root.file and name == specs.root.name:
                update["tools"] = [*unit.tools, *(McpTools(mcp=s) for s in servers)]
            units[name] = unit.model_copy(update=update)
        files[key] = dataclasses.replace(spec_file, units=units)
    added = {s.name: s for s in servers}
    return dataclasses.replace(specs, files=files, servers={**specs.servers, **added})


@asynccontextmanager
async def open_runtime(config: AgentrtConfig, agent: SpecSet | str) -> AsyncIterator[Runtime]:
    """A ``Runtime`` from ``config`` (its models, agents, MCP servers and
    built-in tools) whose default agent is ``agent``: a configured one by
    name, or a spec set (run as ``CLI_AGENT``)."""
    name = agent if isinstance(agent, str) else CLI_AGENT
    given = {} if isinstance(agent, str) else {CLI_AGENT: agent}
    runtime_config = config.runtime.model_copy(update={"default_agent": name})
    # A required MCP server (``--mcp`` ones are) that does not start fails the open.
    async with Runtime(runtime_config, tools=config.tools.build(), agents=given) as rt:
        yield rt


@asynccontextmanager
async def eval_runner(args: Any) -> AsyncIterator[Runtime]:
    """The ``Runtime`` ``agentrt eval`` and ``agentrt aggregate`` use, from
    their ``--config``, ``--agent``, ``--model`` and ``--keep-workspaces``
    arguments; early stop is off, so every run draws its whole pool of
    rollouts."""
    from agentrt.runtime.config._config_file import load_config

    config = load_config(getattr(args, "config", None)).with_placement(
        getattr(args, "placement", None), getattr(args, "ray_address", None)
    )
    model = getattr(args, "model", None)
    if model is not None:
        config = with_default_model(config, model)
    changes: dict[str, Any] = {"early_stop": False}
    if getattr(args, "keep_workspaces", False):
        changes["keep_workspaces"] = True
    runtime = config.runtime.model_copy(update=changes)
    config = config.model_copy(update={"runtime": runtime})
    async with open_runtime(config, agent_specs(getattr(args, "agent", None), config)) as rt:
        yield rt


def with_default_model(config: AgentrtConfig, model: str) -> AgentrtConfig:
    """``config`` whose agents that name no model use ``model`` (``--model``)."""
    runtime = config.runtime
    models = runtime.models.model_copy(update={"default": model})
    return config.model_copy(update={"runtime": runtime.model_copy(update={"models": models})})
