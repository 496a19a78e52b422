"""``agentrt.toml``: valid files load (the examples too), bad ones say
``file:line: key: reason``, and ``key_line`` finds where a key is written."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentrt.agents import AgentConfig
from agentrt.runtime.config._config_file import (
    AgentrtConfig,
    ApiKeyConfig,
    PlacementConfig,
    ServerConfig,
    StoreConfig,
    ToolsConfig,
    WebhookConfig,
    config_from_mapping,
    key_line,
    load_config,
)
from agentrt.runtime.config._runtime_config import WorkerResources
from agentrt.runtime.engine._runtime import RuntimeConfig
from agentrt.runtime.kernel._errors import ConfigError
from agentrt.tools.mcp._mcp_config import HttpServerConfig, StdioServerConfig
from tests._support.configs import write_config

pytestmark = pytest.mark.process

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = sorted((ROOT / "examples").glob("*.toml"))

SPEC = """\
name: planner
instructions: Plan, then answer.
tools: [calculator]
"""


def test_a_full_file_loads_with_paths_resolved_against_it(tmp_path: Path) -> None:
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "planner.yaml").write_text(SPEC)
    path = write_config(
        tmp_path,
        """
rollouts = 4
aggregate = "rtv"
aggregate_options = { g = 2, v = 3 }
log_level = "debug"

[server]
host = "0.0.0.0"
port = 9000
token_env = "AGENTRT_TEST_TOKEN"
allowed_hosts = ["agents.internal:9000"]

[store]
path = "state/runs.db"

[tools]
files_root = "docs"

[placement]
kind = "local"

[models.backends.local]
kind = "scripted"
replies = ["x"]

[agents.solver]
instructions = "Solve it."
tools = ["calculator"]

[agents]
planner = "specs/planner.yaml"
picked = "specs/planner.yaml#planner"

[mcp.files]
command = "npx"
args = ["-y", "@modelcontextprotocol/server-filesystem", "."]
env = { DEBUG = "1" }
cwd = "data"

[mcp.remote]
url = "https://mcp.example.com/mcp"
bearer_token_env = "REMOTE_TOKEN"
""",
    )
    config = load_config(path)
    assert config.source == str(path)
    assert config.server.host == "0.0.0.0"
    assert config.server.port == 9000
    assert config.store.path == tmp_path / "state" / "runs.db"
    assert config.tools.files_root == tmp_path / "docs"
    assert config.placement.kind == "local"
    assert config.log_level == "DEBUG"
    assert config.runtime.rollouts == 4
    assert config.runtime.aggregate_options == {"g": 2, "v": 3}
    solver = config.runtime.agents["solver"]
    assert isinstance(solver, AgentConfig)
    assert solver.name == "solver"
    assert config.runtime.agents["planner"] == str(tmp_path / "specs" / "planner.yaml")
    assert config.runtime.agents["picked"] == str(tmp_path / "specs" / "planner.yaml") + "#planner"
    files, remote = config.runtime.mcp["files"], config.runtime.mcp["remote"]
    assert isinstance(files, StdioServerConfig)
    assert (files.name, files.command, files.env, files.cwd) == (
        "files",
        "npx",
        {"DEBUG": "1"},
        tmp_path / "data",
    )
    assert isinstance(remote, HttpServerConfig)
    assert remote.url == "https://mcp.example.com/mcp"


def test_no_file_is_the_defaults() -> None:
    config = load_config(None)
    assert config == AgentrtConfig()
    assert config.server.port == 8765
    assert config.runtime.agents == {}
    assert config.runtime.mcp == {}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_example_loads(path: Path) -> None:
    load_config(path)


def test_the_example_runs_the_embedded_model_with_both_kinds_of_agent() -> None:
    config = load_config(ROOT / "examples" / "agentrt.toml")
    assert list(config.runtime.models.backends) == ["embedded"]
    assert config.runtime.models.backends["embedded"].kind == "embedded"
    assert isinstance(config.runtime.agents["solver"], AgentConfig)
    assert config.runtime.agents["planner"] == str(ROOT / "examples" / "planner_workers.yaml")
    assert config.runtime.default_agent == "solver"
    assert sorted(config.runtime.mcp) == ["everything", "files"]
    assert config.store.path == ROOT / "examples" / "agentrt-runs.db"


@pytest.mark.parametrize(
    ("text", "where", "reason"),
    [
        # bad TOML syntax: the line tomllib reports
        ("rollouts = 1\nthis is = not toml\n", ":2", "not valid TOML: Expected '='"),
        # unknown top-level key, with the closest known one
        (
            "rollouts = 1\n\nrolouts = 2\n",
            ":3: rolouts",
            "unknown key 'rolouts'; did you mean 'rollouts'?",
        ),
        # bad backend kind, in a table and in an inline table
        (
            "[models]\ndefault = 'v'\n\n[models.backends.v]\nkind = 'vlm'\n",
            ":5: models.backends.v.kind",
            "unknown backend kind 'vlm'",
        ),
        (
            "[models.backends]\nv = { kind = 'vlm' }\n",
            ":2: models.backends.v.kind",
            "unknown backend kind 'vlm'",
        ),
        # a backend's own options are checked by its kind
        (
            "[models.backends.v]\nkind = 'openai'\nbase_url = 'http://x/v1'\nmodels = ['m']\n"
            "timeout = 3\n",
            ":5: models.backends.v.timeout",
            "unknown key 'timeout'",
        ),
        ("[models]\ndefualt = 'x'\n", ":2: models.defualt", "did you mean 'default'?"),
        # unknown and bad agent fields
        (
            "[agents.solver]\ninstructions = 'x'\ninstuctions = 'y'\n",
            ":3: agents.solver.instuctions",
            "unknown key 'instuctions'; did you mean 'instructions'?",
        ),
        (
            "[agents.a]\ntemperature = -1\n",
            ":2: agents.a.temperature",
            "greater than or equal to 0",
        ),
        ("[agents.a]\nname = 'b'\n", ":2: agents.a.name", "differs from its key 'a'"),
        ("[agents]\nx = 3\n", ":2: agents.x", "an agent is a table"),
        # an inline agent's MCP resources and prompt name servers of [mcp]
        (
            "[mcp.fx]\ncommand = 'x'\n\n[agents.a]\n"
            "resources = [{ mcp = 'fx', uri = 'x://a' }, { mcp = 'fs', uri = 'x://b' }]\n",
            ":5: agents.a.resources.1.mcp",
            "no MCP server named 'fs' under [mcp] (configured: fx)",
        ),
        (
            "[agents.a]\nprompt = { mcp = 'fx', name = 'p' }\n",
            ":2: agents.a.prompt.mcp",
            "no MCP server named 'fx' under [mcp] (configured: none)",
        ),
        (
            "[mcp.fx]\ncommand = 'x'\n\n[agents.a]\n"
            "resources = [{ mcp = 'fx', uri = 'x://a', arguments = { n = '1' } }]\n",
            ":5: agents.a.resources.0",
            "`arguments` fill a `template`",
        ),
        (
            "[mcp.fx]\ncommand = 'x'\n\n[agents.a]\nprompt = { mcp = 'fx', nmae = 'p' }\n",
            ":5: agents.a.prompt",
            "unknown key 'nmae' (did you mean 'name'?)",
        ),
        # a spec path that does not exist
        ("[agents]\nplanner = 'nope.yaml'\n", ":2: agents.planner", "no spec file 'nope.yaml'"),
        # [placement] is reserved
        (
            "[placement]\nkind = 'k8s'\n",
            ":2: placement.kind",
            "Input should be 'local' or 'ray'",
        ),
        ("[placement]\nnodes = 4\n", ":2: placement.nodes", "unknown key 'nodes'"),
        # MCP servers
        (
            "[mcp.files]\ncomand = 'npx'\n",
            ":2: mcp.files.comand",
            "unknown key 'comand'; did you mean 'command'?",
        ),
        ("[mcp.files]\nname = 'x'\ncommand = 'npx'\n", ":1: mcp", "named 'x'"),
        ("[mcp.web]\nurl = 'ftp://x'\n", ":2: mcp.web.url", "should match pattern"),
        # the daemon's sections
        ("[server]\nport = 'high'\n", ":2: server.port", "valid integer"),
        ("[server]\nport = 70000\n", ":2: server.port", "less than or equal to 65535"),
        ("[server]\nhots = 'x'\n", ":2: server.hots", "did you mean 'host'?"),
        ("[server]\nhost = '0.0.0.0'\n", ":1: server", "requires a bearer token"),
        ("[server]\ntoken = 'short'\n", ":2: server.token", "at least 16"),
        ("[store]\ndurability = 'sometimes'\n", ":2: store.durability", "'process' or 'power'"),
        ("log_level = 'loud'\n", ":1: log_level", "expected one of DEBUG"),
        # scaling defaults
        ("rollouts = 0\n", ":1: rollouts", "greater than or equal to 1"),
        ("aggregate = 'majorty'\n", ":1: aggregate", "unknown aggregator 'majorty'"),
        (
            "aggregate = 'rtv'\naggregate_options = { g = 'x' }\n",
            ":2: aggregate_options",
            "g: Input should be a valid integer",
        ),
    ],
)
def test_a_bad_file_names_file_line_key_and_reason(
    tmp_path: Path, text: str, where: str, reason: str
) -> None:
    path = write_config(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    message = str(caught.value)
    assert message.startswith(f"{path}{where}"), message
    assert reason in message, message


def test_a_bad_spec_file_is_reported_with_the_agent_naming_it(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("name: bad\ntemperature: hot\n")
    path = write_config(tmp_path, "rollouts = 2\n\n[agents]\nbad = 'bad.yaml'\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    message = str(caught.value)
    assert message.startswith(f"{path}:4: agents.bad: the spec file is invalid: "), message
    assert "bad.yaml:2" in message
    assert "temperature" in message


@pytest.mark.parametrize(
    "section",
    [
        AgentrtConfig,
        RuntimeConfig,
        ServerConfig,
        StoreConfig,
        ToolsConfig,
        PlacementConfig,
        WorkerResources,
        WebhookConfig,
        ApiKeyConfig,
    ],
)
def test_docs_describe_every_key(section: type[AgentrtConfig]) -> None:
    doc = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    for key in section.model_fields:
        if section is AgentrtConfig and key in ("runtime", "source"):
            continue
        assert f"`{key}`" in doc or f"`[{key}]`" in doc, f"docs/configuration.md: {key}"


def test_a_missing_file_says_so(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"absent.toml: cannot read the configuration: No such"):
        load_config(tmp_path / "absent.toml")


def test_json_by_suffix(tmp_path: Path) -> None:
    (tmp_path / "planner.yaml").write_text(SPEC)
    path = write_config(
        tmp_path,
        '{"rollouts": 2, "agents": {"planner": "planner.yaml", "s": {"tools": []}}}',
        name="agentrt.json",
    )
    config = load_config(path)
    assert config.runtime.rollouts == 2
    assert config.runtime.agents["planner"] == str(tmp_path / "planner.yaml")
    bad = write_config(tmp_path, '{"rollouts": 2,\n "rolouts": 3}', name="bad.json")
    with pytest.raises(ConfigError, match=r"bad.json: rolouts: unknown key 'rolouts'"):
        load_config(bad)
    broken = write_config(tmp_path, '{"rollouts": 2,\n}', name="broken.json")
    with pytest.raises(ConfigError, match=r"broken.json:2: not valid JSON"):
        load_config(broken)


def test_a_mapping_built_in_code_validates_the_same_way() -> None:
    config = config_from_mapping(
        {"agents": {"calc": {"tools": ["calculator"]}}, "server": {"port": 0}}, source="test"
    )
    assert config.server.port == 0
    calc = config.runtime.agents["calc"]
    assert isinstance(calc, AgentConfig)
    assert calc.name == "calc"
    with pytest.raises(ConfigError, match=r"^test: placement: address only apply to kind"):
        config_from_mapping({"placement": {"address": "auto"}}, source="test")


def test_command_line_overrides(tmp_path: Path) -> None:
    config = load_config(write_config(tmp_path, "[server]\nport = 9000\n"))
    moved = config.with_server(host=None, port=9001).with_store(tmp_path / "other.db")
    assert (moved.server.port, moved.store.path) == (9001, tmp_path / "other.db")
    assert config.with_store(None) is config
    with pytest.raises(ConfigError, match=r"agentrt.toml: server: .*requires a bearer token"):
        config.with_server(host="0.0.0.0")


def test_the_token_env_must_be_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = load_config(write_config(tmp_path, "[server]\ntoken_env = 'AGENTRT_TEST_TOKEN'\n"))
    monkeypatch.delenv("AGENTRT_TEST_TOKEN", raising=False)
    with pytest.raises(ConfigError, match="AGENTRT_TEST_TOKEN is unset"):
        config.server.resolved_token()
    monkeypatch.setenv("AGENTRT_TEST_TOKEN", "t" * 20)
    assert config.server.resolved_token() == "t" * 20


KEYS = """\
# a comment = not a key
title = "x"                       # line 2
[models]                          # line 3
default = "v"
backends.inline.kind = "openai"   # line 5: dotted keys
[models.backends.v]
kind = "vlm"                      # line 7
notes = \"\"\"
[not.a.table]
kind = "inside a string"
\"\"\"
hosts = [
  "a",
  ["b", "c"],
]
[ "agents" . 'my agent' ]         # line 16: quoted, spaced
tools = ["calculator"]
[[runs]]                          # line 18
name = "first"
[[runs]]                          # line 20
name = "second"
[runs.extra]                      # line 22
deep = { a = 1 }
"""


@pytest.mark.parametrize(
    ("key", "line"),
    [
        (("title",), 2),
        (("models",), 3),
        (("models", "default"), 4),
        (("models", "backends", "inline", "kind"), 5),
        (("models", "backends", "inline", "base_url"), 5),  # the enclosing written key
        (("models", "backends", "v"), 6),
        (("models", "backends", "v", "kind"), 7),
        (("models", "backends", "v", "notes"), 8),
        (("models", "backends", "v", "hosts", 1), 12),
        (("agents", "my agent"), 16),
        (("agents", "my agent", "tools", 0), 17),
        (("runs", 0, "name"), 19),
        (("runs", 1, "name"), 21),
        (("runs", 1, "extra"), 22),
        (("runs", 1, "extra", "deep", "a"), 23),
        (("not", "a", "table"), None),  # inside a multi-line string
        (("kind",), None),
        (("nothing",), None),
    ],
)
def test_key_line_finds_where_a_key_is_written(
    key: tuple[str | int, ...], line: int | None
) -> None:
    assert key_line(KEYS, key) == line
