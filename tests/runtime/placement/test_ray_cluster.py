"""A real 3-node Ray cluster (a head and two worker nodes, each its own
raylet and worker processes) on loopback, in a network namespace of its
own (RECIPES.md: Ray would otherwise bind the machine's external address)
and a PID namespace (the cluster's teardown kills every process in it but
the inner pytest): this
test starts ``pytest tests/runtime/placement/cluster`` inside ``unshare --net
--map-root-user --pid``, where the cluster's fixture starts the nodes, and
passes when every test there passes.  Skipped without Ray
(failed under ``AGENTRT_REQUIRE_RAY=1``, as CI sets).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agentrt.runtime.kernel._parent_death import guarded_argv

pytestmark = pytest.mark.process

ROOT = Path(__file__).resolve().parents[3]


def _require(ok: bool, why: str) -> None:
    if ok:
        return
    if os.environ.get("AGENTRT_REQUIRE_RAY") == "1":
        pytest.fail(f"AGENTRT_REQUIRE_RAY=1 but {why}")
    pytest.skip(why)


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.timeout(1500)
def test_the_cluster_tests_pass_inside_their_network_namespace() -> None:
    _require(importlib.util.find_spec("ray") is not None, "Ray is not installed (the ray extra)")
    unshare = shutil.which("unshare")
    _require(unshare is not None, "unshare (util-linux) is not installed")
    assert unshare is not None
    probe = subprocess.run(
        [unshare, "--net", "--map-root-user", "--fork", "--pid", "--mount-proc", "true"],
        capture_output=True,
        check=False,
    )
    _require(probe.returncode == 0, f"no user+network namespaces here: {probe.stderr!r}")
    # Loopback in a namespace of its own: no token between the nodes.
    env = {
        **os.environ,
        "AGENTRT_RAY_NETNS": "1",
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_AUTH_MODE": "disabled",
    }
    script = (
        "ip link set lo up && exec "
        f"{sys.executable} -m pytest tests/runtime/placement/cluster -p no:cacheprovider -q -x "
        "--timeout 600 -rs --durations=15"
    )
    # A PID namespace too: the cluster's teardown sees only its own processes.
    # Gone with this pytest, even SIGKILLed: the launcher stops unshare,
    # unshare kills its child (the namespace's first process), and the
    # kernel then the whole PID namespace (the cluster's nodes too).
    done = subprocess.run(
        guarded_argv(
            [
                unshare,
                "--net",
                "--map-root-user",
                "--fork",
                "--kill-child",
                "--pid",
                "--mount-proc",
                "bash",
                "-c",
                script,
            ],
            grace_s=10,
        ),
        start_new_session=True,
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1400,
        check=False,
    )
    tail = "\n".join((done.stdout + "\n" + done.stderr).splitlines()[-80:])
    assert done.returncode == 0, tail
    assert " passed" in done.stdout, tail
    print(tail)  # the inner run's slowest tests (shown with -s or -rP)
