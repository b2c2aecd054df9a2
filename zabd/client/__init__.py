"""asyncio client library, CLI commands and load generator for zabd."""

from zabd.client.client import Client, ConnectionLost, OutcomeUnknown, RequestTimeout, ZabdError, parse_servers

__all__ = ["Client", "ConnectionLost", "OutcomeUnknown", "RequestTimeout", "ZabdError", "parse_servers"]
