"""docs/sandbox.md stays true: its spec loads and names the sandboxed tools
it describes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from agentrt.agents._bindings import builtin_tool
from agentrt.agents._spec import BuiltinTool
from agentrt.agents._spec_loader import load_spec
from agentrt.tools import EditorTool, PythonSandbox, ShellTool

pytestmark = pytest.mark.process

DOC = Path(__file__).resolve().parents[3] / "docs" / "sandbox.md"


def test_the_spec_in_the_doc_loads(tmp_path: Path) -> None:
    block = re.search(r"```yaml\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    assert block is not None
    spec_file = tmp_path / "coder.yaml"
    spec_file.write_text(block.group(1), encoding="utf-8")
    specs = load_spec(spec_file)
    coder = specs.unit(specs.root)
    tools = []
    for binding in coder.tools:
        assert isinstance(binding, BuiltinTool)
        tools.append(
            builtin_tool(
                binding,
                base_dir=tmp_path,
                where="coder",
                tool_timeout_s=coder.limits.tool_timeout_s,
            )
        )
    shell, editor, python, sh = tools
    assert isinstance(shell, ShellTool)
    assert not shell.sandbox.config.network
    assert shell.sandbox.config.timeout_s == 120  # the agent's tool_timeout_s
    assert isinstance(sh, ShellTool)
    assert sh.spec.name == "sh"
    assert sh.sandbox.config.read_only_paths == ("/opt/venv",)
    assert sh.sandbox.config.timeout_s == 300
    assert isinstance(editor, EditorTool)
    assert isinstance(python, PythonSandbox)
    assert python.config.network
