"""The one place a server's storage backend is chosen.

``disk`` is wired in here once ``DiskStorage`` lands in zabd/storage/.
"""

from __future__ import annotations

from zabd.server.config import ConfigError, ServerConfig
from zabd.storage.base import MemoryStorage, Storage


def open_storage(config: ServerConfig) -> Storage:
    if config.storage == "memory":
        return MemoryStorage()
    raise ConfigError(
        f"config error: field 'storage' = {config.storage!r}: the disk backend is not available in this build; "
        "expected 'memory'"
    )
