"""A process that asked to die with its parent does, when the parent is SIGKILLed."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import psutil
import pytest

pytestmark = [
    pytest.mark.process,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a Linux guarantee"),
]

# The parent starts a child that asks for SIGKILL on its death, reports the
# child's pid once the request is made, and waits to be killed.
PARENT = textwrap.dedent(
    """
    import os, subprocess, sys
    child = subprocess.Popen([sys.executable, "-c", sys.argv[1], str(os.getpid())],
                             stdout=subprocess.PIPE, text=True)
    print(child.stdout.readline().strip(), flush=True)
    child.wait()
    """
)
CHILD = textwrap.dedent(
    """
    import os, signal, sys, time
    from agentrt.runtime.kernel._parent_death import die_with
    if not die_with(int(sys.argv[1]), signal.SIGKILL):
        sys.exit("orphaned")
    print(os.getpid(), flush=True)
    time.sleep(600)
    """
)


def test_a_child_dies_with_its_sigkilled_parent() -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, CHILD], stdout=subprocess.PIPE, text=True
    )
    try:
        assert parent.stdout is not None
        child = psutil.Process(int(parent.stdout.readline()))
        parent.kill()
        parent.wait(30)
        deadline = time.monotonic() + 30  # a hang guard, not a measurement
        while child.is_running() and child.status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() < deadline, f"{child.pid} outlived its parent"
            time.sleep(0.02)
    finally:
        parent.kill()
        parent.wait(30)
        if parent.stdout is not None:
            parent.stdout.close()


def test_a_child_whose_parent_is_not_the_one_named_is_told() -> None:
    # Its parent (this process) is not process 1: as if the parent named
    # had died before the request took effect.
    done = subprocess.run(
        [sys.executable, "-c", CHILD, "1"], capture_output=True, text=True, timeout=60, check=False
    )
    assert (done.returncode, done.stderr.strip()) == (1, "orphaned")
