"""Observability (runtime floor): structlog logging and OpenTelemetry traces."""
