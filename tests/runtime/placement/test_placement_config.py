"""``[placement]`` and what a placement is refused with, without a cluster:
the file, the command-line overrides, the embedding setting, the errors
named before any model call, and Ray staying an optional extra."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import anyio
import anyio.abc
import pytest

from agentrt import Runtime, RuntimeConfig
from agentrt.runtime.config._config_file import config_from_mapping, load_config
from agentrt.runtime.config._runtime_config import PlacementConfig
from agentrt.runtime.kernel._errors import ConfigError
from agentrt.runtime.placement._local import LocalPlacement
from agentrt.testing import ScriptedBackend

pytestmark = [pytest.mark.anyio, pytest.mark.process]


def test_the_file_sets_a_ray_placement(tmp_path: Path) -> None:
    path = tmp_path / "agentrt.toml"
    path.write_text(
        "[placement]\n"
        'kind = "ray"\n'
        'address = "ray://head.internal:10001"\n'
        "workers = 8\n"
        "[placement.worker]\n"
        "num_cpus = 2\n"
        "memory_mb = 4096\n"
        "resources = { sandbox = 1 }\n"
    )
    config = load_config(path)
    placement = config.placement
    assert placement.kind == "ray"
    assert placement.workers == 8
    assert placement.address == "ray://head.internal:10001"
    assert placement.worker.num_cpus == 2
    assert placement.worker.memory_mb == 4096
    assert placement.worker.resources == {"sandbox": 1}
    # The placement is part of the runtime's configuration (the embedding API's too).
    assert config.runtime.placement is placement


@pytest.mark.parametrize(
    ("table", "where", "reason"),
    [
        ({"kind": "k8s"}, "placement.kind", "'local' or 'ray'"),
        ({"workers": 0, "kind": "ray"}, "placement.workers", "greater than or equal to 1"),
        ({"address": "auto"}, "placement", "address only apply to kind = 'ray'"),
        ({"affinity_slack": 2}, "placement", "affinity_slack only apply with workers"),
        ({"workers": 0}, "placement.workers", "greater than or equal to 1"),
        ({"kind": "ray", "worker": {"gpus": 1}}, "placement.worker.gpus", "unknown key"),
        ({"kind": "ray", "worker": {"num_cpus": -1}}, "placement.worker.num_cpus", ">= 0|equal"),
    ],
)
def test_a_bad_placement_names_its_key(table: dict[str, object], where: str, reason: str) -> None:
    with pytest.raises(ConfigError, match=rf"^test: {where}: .*({reason})"):
        config_from_mapping({"placement": table}, source="test")


def test_workers_move_the_local_placement_into_worker_processes() -> None:
    local = config_from_mapping({"placement": {"workers": 3}}, source="f").placement
    assert local.kind == "local"
    assert local.workers == 3
    assert not local.in_process
    assert PlacementConfig().in_process
    assert PlacementConfig().workers is None
    # Ray's default stays two workers (the driver reads an unset count so).
    assert config_from_mapping({"placement": {"kind": "ray"}}, source="f").placement.workers is None


def test_the_command_line_overrides_the_file() -> None:
    base = config_from_mapping(
        {"placement": {"kind": "ray", "address": "10.0.0.1:6379", "workers": 4}}, source="f"
    )
    assert base.with_placement(None, None) is base
    local = base.with_placement("local", None)
    assert local.placement == PlacementConfig()
    moved = base.with_placement(None, "ray://other:10001")
    assert moved.placement.kind == "ray"
    assert moved.placement.address == "ray://other:10001"
    assert moved.placement.workers == 4  # the file's other keys stay
    implied = config_from_mapping({}, source="f").with_placement(None, "auto")
    assert implied.placement.kind == "ray"
    assert implied.placement.address == "auto"
    with pytest.raises(ConfigError, match="--ray-address needs the ray placement"):
        base.with_placement("local", "auto")


async def test_the_default_placement_is_local() -> None:
    async with Runtime(backends=[ScriptedBackend(["42"])]) as rt:
        assert isinstance(rt.placement, LocalPlacement)
        assert rt.placement.kind == "local"
        assert (await rt.run("6*7?")).answer == "42"


async def test_an_unreachable_cluster_is_named_before_any_model_call() -> None:
    pytest.importorskip("ray")
    config = RuntimeConfig.model_validate(
        {**NO_MODEL, "placement": {"kind": "ray", "address": "127.0.0.1:9", "connect_timeout_s": 5}}
    )
    with pytest.raises(ConfigError, match=r"placement.address: cannot reach the Ray cluster"):
        async with Runtime(config):
            pass
    bad = RuntimeConfig.model_validate(
        {**NO_MODEL, "placement": {"kind": "ray", "address": "nowhere"}}
    )
    with pytest.raises(ConfigError, match="is not a Ray address"):
        async with Runtime(bad):
            pass


RAY_DRIVER = "agentrt.runtime.placement._ray_driver"
#: A backend that needs no embedded model (nothing is called: the
#: placement fails the open first).
NO_MODEL = {"models": {"backends": {"s": {"kind": "scripted", "replies": ["x"]}}}}
REFUSED = "Initialization failure from server:\nRuntimeError: Starting Ray client server failed."


@pytest.mark.parametrize(
    ("failures", "calls", "reason"),
    [
        # The head's proxy failed to spawn the session's server: asked again.
        ([ConnectionAbortedError(REFUSED), ValueError("second")], 2, "second"),
        ([ConnectionAbortedError(REFUSED)] * 3, 3, "Starting Ray client server failed"),
        # Anything else (a version mismatch, a bad address) is final.
        ([RuntimeError("Version mismatch")], 1, "Version mismatch"),
    ],
)
async def test_a_ray_client_session_the_head_fails_to_open_is_asked_again(
    monkeypatch: pytest.MonkeyPatch, failures: list[Exception], calls: int, reason: str
) -> None:
    ray = pytest.importorskip("ray")
    tried: list[dict[str, object]] = []

    def init(**options: object) -> None:
        tried.append(options)
        raise failures[len(tried) - 1]

    monkeypatch.setattr(ray, "init", init)
    monkeypatch.setattr(f"{RAY_DRIVER}.CLIENT_RETRY_PAUSE_S", 0.0)
    async with await anyio.create_tcp_listener(local_host="127.0.0.1") as head:
        port = head.extra(anyio.abc.SocketAttribute.local_port)
        address = f"ray://127.0.0.1:{port}"
        config = RuntimeConfig.model_validate(
            {**NO_MODEL, "placement": {"kind": "ray", "address": address}}
        )
        with pytest.raises(ConfigError, match=f"(?s)placement.address: cannot reach .*{reason}"):
            async with Runtime(config):
                pass
    assert len(tried) == calls
    assert all(options["address"] == address for options in tried)


async def test_what_cannot_reach_a_worker_is_refused() -> None:
    ray = RuntimeConfig.model_validate({"placement": {"kind": "ray"}})
    with pytest.raises(ConfigError, match="backends given as objects"):
        async with Runtime(ray, backends=[ScriptedBackend(["x"])]):
            pass


def test_agentrt_and_a_local_run_do_not_import_ray() -> None:
    code = (
        "import sys, anyio, agentrt\n"
        "from agentrt.testing import ScriptedBackend\n"
        "async def main():\n"
        "    async with agentrt.Runtime(backends=[ScriptedBackend(['1'])]) as rt:\n"
        "        await rt.run('x')\n"
        "anyio.run(main)\n"
        "assert 'ray' not in sys.modules, 'ray was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
