"""The placement tests: the cluster ones (``cluster/``) run only inside the
network namespace ``test_ray_cluster.py`` starts them in."""

from __future__ import annotations

import os

collect_ignore_glob = [] if os.environ.get("AGENTRT_RAY_NETNS") == "1" else ["cluster/*"]
