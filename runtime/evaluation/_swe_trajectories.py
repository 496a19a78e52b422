"""Trajectories in mini-SWE-agent's file format (``*.traj.json``), so its
inspector and scripts read agentrt's rollouts.

Owns ``MINI_SWE_FORMAT``, ``mini_swe_trajectory`` (one rollout as that
format's object: ``trajectory_format``, ``instance_id``, ``messages`` in the
chat-completions shape, ``info`` with ``exit_status``, ``submission`` and
``model_stats``) and ``write_traj_files`` (a pool's rollouts as
``DIR/<instance_id>/<rollout_id>.traj.json``).  agentrt's own record of a
rollout is ``_trajectory_data``; this is an export only, never read back.
Must not run rollouts.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import msgspec

from agentrt.protocols._messages import AssistantMessage, ChatMessage, ToolMessage
from agentrt.protocols._trajectory import Trajectory, TrajectorySummary
from agentrt.runtime.evaluation._trajectory_data import Pool

__all__ = ["MINI_SWE_FORMAT", "mini_swe_trajectory", "write_traj_files"]

MINI_SWE_FORMAT: Final = "mini-swe-agent-1.1"
"""The ``trajectory_format`` mini-SWE-agent 2.x writes and its inspector reads."""


def _message(message: ChatMessage) -> dict[str, Any]:
    out: dict[str, Any] = msgspec.to_builtins(message)
    if isinstance(message, AssistantMessage) and message.tool_calls:
        # mini-SWE-agent keeps the parsed commands of a reply under
        # extra.actions; its inspector starts a step at each.
        actions = []
        for call in message.tool_calls:
            try:
                arguments = msgspec.json.decode(call.function.arguments)
            except msgspec.DecodeError:
                arguments = None
            command = arguments.get("command") if isinstance(arguments, dict) else None
            actions.append(
                {
                    "command": command if isinstance(command, str) else call.function.arguments,
                    "tool": call.function.name,
                    "tool_call_id": call.id,
                }
            )
        out["extra"] = {"actions": actions}
    return out


def _messages(trajectory: Trajectory) -> list[dict[str, Any]]:
    """The conversation: the last step's context (every earlier turn), its
    reply and its tool results."""
    if not trajectory.steps:
        return []
    last = trajectory.steps[-1]
    messages = [_message(m) for m in last.messages]
    if last.reply is not None and last.reply.choices:
        messages.append(_message(last.reply.message))
    for result in last.tool_results:
        messages.append(_message(ToolMessage(content=result.content, tool_call_id=result.call_id)))
    return messages


def mini_swe_trajectory(
    instance_id: str, trajectory: Trajectory, summary: TrajectorySummary | None = None
) -> dict[str, Any]:
    """One rollout as a mini-SWE-agent trajectory object.  ``submission``
    is the rollout's diff; ``exit_status`` why it ended (``Submitted`` when
    it answered); agentrt's own fields (status, tokens, the tests' verdict)
    are under ``info.agentrt``."""
    verification = summary.verification if summary is not None else None
    answered = trajectory.answer is not None and trajectory.status == "finished"
    return {
        "trajectory_format": MINI_SWE_FORMAT,
        "instance_id": instance_id,
        "messages": _messages(trajectory),
        "info": {
            "exit_status": "Submitted"
            if answered
            else (trajectory.stop_reason or trajectory.status),
            "submission": trajectory.answer or "",
            "model_stats": {
                "instance_cost": trajectory.cost.usd,
                "api_calls": trajectory.cost.model_calls,
            },
            "agentrt": {
                "rollout_id": trajectory.rollout_id,
                "run_id": trajectory.run_id,
                "agent": trajectory.agent,
                "status": trajectory.status,
                "stop_reason": trajectory.stop_reason,
                "tokens": trajectory.cost.usage.total_tokens,
                "tests_passed": None if verification is None else verification.passed,
            },
        },
    }


def write_traj_files(directory: Path, pools: Sequence[Pool]) -> int:
    """Write each pool's trajectories as
    ``directory/<instance_id>/<rollout_id>.traj.json`` (the layout
    mini-SWE-agent's inspector finds with ``*.traj.json``).  Returns the
    files written."""
    written = 0
    for pool in pools:
        instance_id = pool.task_id or pool.group
        summaries = {s.rollout_id: s for s in pool.summaries}
        folder = Path(directory) / instance_id
        for rollout_id in sorted(pool.trajectories):
            data = mini_swe_trajectory(
                instance_id, pool.trajectories[rollout_id], summaries.get(rollout_id)
            )
            folder.mkdir(parents=True, exist_ok=True)
            target = folder / f"{rollout_id}.traj.json"
            target.write_bytes(msgspec.json.format(msgspec.json.encode(data), indent=2))
            written += 1
    return written
