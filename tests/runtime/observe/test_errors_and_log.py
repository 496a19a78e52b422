"""The exception tree and the logging set-up."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from agentrt.runtime.kernel import _errors as errors

pytestmark = pytest.mark.process


def _python(code: str) -> subprocess.CompletedProcess[str]:
    """``code`` run by a fresh interpreter (nothing imported, nothing
    configured), which must exit 0."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)


def test_the_tree_separates_user_mistakes_failures_and_control() -> None:
    assert issubclass(errors.ConfigError, errors.UserError)
    assert issubclass(errors.UnknownModelError, errors.UserError)
    assert issubclass(errors.RateLimited, errors.BackendError)
    assert issubclass(errors.BackendError, errors.RuntimeFailure)
    assert issubclass(errors.BudgetExceeded, errors.ControlSignal)
    assert not issubclass(errors.BudgetExceeded, errors.RuntimeFailure)
    for cls in (errors.UserError, errors.RuntimeFailure, errors.ControlSignal):
        assert issubclass(cls, errors.AgentrtError)


def test_the_docstring_draws_every_class() -> None:
    doc = errors.__doc__ or ""
    names = [
        n
        for n, v in vars(errors).items()
        if isinstance(v, type) and issubclass(v, Exception) and v.__module__ == errors.__name__
    ]
    missing = [n for n in names if n not in doc]
    assert not missing, f"draw these in the module docstring: {missing}"


def test_messages_say_where() -> None:
    err = errors.ConfigError("unknown key 'modle'", where="agentrt.toml:models.small")
    assert str(err) == "agentrt.toml:models.small: unknown key 'modle'"
    err2 = errors.RateLimited(
        "429 after 5 attempts", backend="vllm", endpoint="http://h:8000/v1", retry_after=2.0
    )
    assert "vllm http://h:8000/v1" in str(err2)
    assert err2.retry_after == 2.0


def test_logs_are_json_off_a_terminal() -> None:
    code = (
        "from agentrt.runtime.observe._log import configure_logging, get_logger\n"
        "log = get_logger('t', run_id='r1')  # module-level loggers come first\n"
        "configure_logging()\n"
        "log.info('hello', steps=3)\n"
    )
    out = _python(code)
    line = json.loads(out.stderr.strip().splitlines()[-1])
    assert line["event"] == "hello"
    assert line["run_id"] == "r1"
    assert line["steps"] == 3
    assert line["level"] == "info"
    assert line["logger_name"] == "t"


def test_a_log_context_binds_for_its_block_and_restores_what_was_bound() -> None:
    code = (
        "from agentrt.runtime.observe._log import configure_logging, get_logger, log_context\n"
        "configure_logging()\n"
        "log = get_logger('t')\n"
        "with log_context(run_id='outer'):\n"
        "    with log_context(run_id='inner', rollout_id='x'):\n"
        "        log.info('in')\n"
        "    log.info('back')\n"
        "log.info('out')\n"
    )
    out = _python(code)
    lines = [json.loads(line) for line in out.stderr.strip().splitlines()[-3:]]
    assert [(x["event"], x.get("run_id"), x.get("rollout_id")) for x in lines] == [
        ("in", "inner", "x"),
        ("back", "outer", None),
        ("out", None, None),
    ]


def test_a_log_context_reaches_an_application_logging_setup() -> None:
    # Unconfigured (an embedding application's own logging): the bound
    # run and rollout ids are in the record too, inner values winning.
    code = (
        "import logging, sys\n"
        "logging.basicConfig(level=logging.INFO, stream=sys.stdout, format='%(message)s')\n"
        "from agentrt.runtime.observe._log import get_logger, log_context\n"
        "log = get_logger('t')\n"
        "with log_context(run_id='outer'):\n"
        "    with log_context(run_id='inner', rollout_id='x'):\n"
        "        log.info('in', n=1)\n"
        "    log.info('back')\n"
        "log.info('out')\n"
    )
    out = _python(code)
    assert out.stdout.splitlines() == [
        "in run_id='inner' rollout_id='x' n=1",
        "back run_id='outer'",
        "out ",
    ]


def test_the_runtime_loads_neither_structlog_nor_optional_parsers() -> None:
    # Issue 11: structlog (and rich), jsonschema and PyYAML load when a
    # command configures logging, a schema'd tool or a response schema is
    # compiled, or a spec file is read: not with ``from agentrt import Runtime``.
    probe = (
        "import sys\n"
        "from agentrt import Runtime\n"
        "print([m for m in ('structlog', 'jsonschema', 'yaml') if m in sys.modules])\n"
    )
    out = _python(probe)
    assert out.stdout.strip() == "[]"


def test_importing_agentrt_configures_nothing() -> None:
    code = (
        "import structlog, agentrt, agentrt.protocols, agentrt.runtime.observe._log\n"
        "print(structlog.is_configured())\n"
    )
    out = _python(code)
    assert out.stdout.strip() == "False"


def test_actor_errors_hang_off_the_project_tree() -> None:
    from agentrt.runtime.kernel import _actor_errors as actor_errors

    assert issubclass(actor_errors.ActorError, errors.RuntimeFailure)
    for name in actor_errors.__all__ if hasattr(actor_errors, "__all__") else dir(actor_errors):
        value = getattr(actor_errors, name)
        if isinstance(value, type) and issubclass(value, actor_errors.ActorError):
            assert name in (errors.__doc__ or ""), f"draw {name} in runtime/kernel/_errors.py"


def test_unconfigured_library_logs_never_reach_stdout() -> None:
    code = (
        "import logging\n"
        "from agentrt.runtime.observe._log import get_logger\n"
        "log = get_logger('agentrt.x', run_id='r1')\n"
        "log.info('quiet')\n"
        "log.warning('loud', n=1)\n"
    )
    out = _python(code)
    assert out.stdout == ""
    assert "quiet" not in out.stderr
    assert "loud" in out.stderr
    assert "run_id='r1'" in out.stderr


def test_an_application_logging_setup_sees_library_records() -> None:
    code = (
        "import logging, sys\n"
        "logging.basicConfig(\n"
        "    level=logging.DEBUG, stream=sys.stdout, format='%(name)s|%(message)s'\n"
        ")\n"
        "from agentrt.runtime.observe._log import get_logger\n"
        "get_logger('agentrt.y').bind(step=2).info('hello')\n"
    )
    out = _python(code)
    assert out.stdout.strip() == "agentrt.y|hello step=2"


def test_configured_logs_follow_a_replaced_stderr() -> None:
    code = (
        "import io, sys\n"
        "from agentrt.runtime.observe._log import configure_logging, get_logger\n"
        "configure_logging(json=True)\n"
        "log = get_logger('t')\n"
        "first = io.StringIO(); sys.stderr = first\n"
        "log.info('one')\n"
        "first.close(); second = io.StringIO(); sys.stderr = second\n"
        "log.info('two')\n"
        "sys.__stdout__.write(second.getvalue())\n"
    )
    out = _python(code)
    assert '"event": "two"' in out.stdout
