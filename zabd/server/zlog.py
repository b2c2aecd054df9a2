"""structlog set-up: JSON lines by default, a console format for humans.

Every event carries ``node``, ``role``, ``epoch`` and ``zxid`` (the node's
last zxid, ``epoch:counter``), read from the replica when the line is written.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, MutableMapping
from typing import Any

import structlog

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}

_context: Callable[[], dict[str, Any]] | None = None


def set_context(fn: Callable[[], dict[str, Any]] | None) -> None:
    global _context
    _context = fn


def _add_context(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    if _context is not None:
        for key, value in _context().items():
            event.setdefault(key, value)
    return event


def configure(fmt: str = "json", level: str = "info") -> None:
    renderer: Any = (
        structlog.processors.JSONRenderer() if fmt == "json" else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            _add_context,
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=structlog.WriteLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )


def get_logger(name: str = "zabd") -> Any:
    return structlog.get_logger(name)
