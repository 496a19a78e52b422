"""Start a run on an agentrt daemon and follow it with ``agentrt.client``: the
events are agentrt's own types, and a dropped connection resumes where it
stopped.  Start the daemon first (``agentrt serve --config
examples/agentrt.toml``); ``AGENTRT_URL`` overrides its address and
``AGENTRT_TOKEN`` is its bearer token, if it has one.
"""

import os

from agentrt.client import Client, NotFound
from agentrt.protocols import RunFinished, RunRequest, ScalingSpec, StepRecorded

with Client(
    os.environ.get("AGENTRT_URL", "http://127.0.0.1:8765"),
    token=os.environ.get("AGENTRT_TOKEN"),
) as client:
    request = RunRequest(task="What is 17 * 23?", agent="solver", scaling=ScalingSpec(rollouts=3))
    with client.create_and_follow(request) as events:
        for event in events:
            if isinstance(event, StepRecorded):
                print(f"{event.rollout_id} step {event.step.index}")
            elif isinstance(event, RunFinished):
                print(f"{event.status}: {event.answer}")
    run = client.get_run(events.run_id or "")
    print(f"{run.run.run_id} cost {run.run.cost.model_calls} model calls")
    try:
        client.get_run("run-000000000000")
    except NotFound as exc:
        print(f"not found: {exc.where}")
