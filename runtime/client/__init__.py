"""The Python client of the daemon's REST + SSE API (``agentrt.client``), and
the webhook signature both sides share."""
