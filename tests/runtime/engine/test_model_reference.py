"""A model reference (``[models] default``, ``--model``, an agent's
``model``) picks the backend of that name first, then the one backend
serving a model of that name; a name two backends serve is an error naming
both (issue 32)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentrt import Runtime, RuntimeConfig
from agentrt.runtime.cli._main import main
from agentrt.runtime.kernel._errors import ConfigError
from agentrt.testing import SimServer, SimServerConfig

pytestmark = pytest.mark.anyio

#: Two backends serving one model name, as with SGLang's native API and its
#: OpenAI API in front of the same server.
TWO_BACKENDS: dict[str, Any] = {
    "first": {"kind": "scripted", "models": ["smol"], "replies": ["from first"]},
    "second": {"kind": "scripted", "models": ["smol"], "replies": ["from second"]},
}


def _config(default: str | None = None, **agents: dict[str, Any]) -> RuntimeConfig:
    models: dict[str, Any] = {"backends": TWO_BACKENDS}
    if default is not None:
        models["default"] = default
    return RuntimeConfig.model_validate({"warm_prefix": False, "models": models, "agents": agents})


async def _answer(config: RuntimeConfig, agent: str | None = None) -> str | None:
    async with Runtime(config) as rt:
        result = await rt.run("hi", agent=agent)
    return result.answer


async def test_the_default_names_a_backend_before_a_model() -> None:
    assert await _answer(_config(default="second")) == "from second"
    assert await _answer(_config(default="first")) == "from first"
    # Unset: the first backend.
    assert await _answer(_config()) == "from first"


async def test_an_agents_model_names_a_backend() -> None:
    config = _config(default="first", pick={"name": "pick", "model": "second"})
    assert await _answer(config, agent="pick") == "from second"


async def test_a_model_served_by_two_backends_is_ambiguous_as_the_default() -> None:
    with pytest.raises(ConfigError, match=r"'smol' is ambiguous.*'first' and 'second'") as caught:
        async with Runtime(_config(default="smol")):
            pass
    assert caught.value.where == "models.default"


async def test_a_model_served_by_two_backends_is_ambiguous_for_an_agent() -> None:
    config = _config(default="first", pick={"name": "pick", "model": "smol"})
    with pytest.raises(ConfigError, match=r"'smol' is ambiguous.*'first' and 'second'") as caught:
        await _answer(config, agent="pick")
    assert caught.value.where == "agent 'pick'.model"


def test_dash_dash_model_picks_the_backend_of_that_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "agentrt.toml"
    path.write_text(
        "[models.backends.first]\nkind = 'scripted'\nmodels = ['smol']\nreplies = ['from first']\n"
        "[models.backends.second]\nkind = 'scripted'\nmodels = ['smol']\n"
        "replies = ['from second']\n"
    )
    argv = ["run", "hi", "--config", str(path), "--json", "--model"]
    assert main([*argv, "second"]) == 0
    assert json.loads(capsys.readouterr().out)["answer"] == "from second"
    assert main([*argv, "smol"]) == 2
    err = capsys.readouterr().err
    assert "'smol' is ambiguous" in err
    assert "'first' and 'second'" in err


async def test_a_name_learnt_from_the_server_is_checked_too() -> None:
    # The SGLang backend gives no model: it reads "sim" from the server on
    # opening, so "sim" is ambiguous only once the backends are open.
    async with SimServer(SimServerConfig(ttft_ms=0, token_ms=0)) as server:
        backends = {
            "sg": {"kind": "sglang", "urls": [server.url], "health_interval_s": 0},
            "canned": {"kind": "scripted", "models": ["sim"], "replies": ["canned"]},
        }
        config = {"models": {"backends": backends, "default": "sim"}, "warm_prefix": False}
        with pytest.raises(ConfigError, match=r"'sim' is ambiguous.*'sg' and 'canned'"):
            async with Runtime(config):
                pass
