"""Managed model servers: processes agentrt starts, watches and stops."""
