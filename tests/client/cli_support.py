"""Running the real ``zabd`` command."""

from __future__ import annotations

import os
import subprocess
import sys


def zabd(*args: str, timeout: float = 60, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m zabd ARGS`` with no ``ZABD_*`` variable of ours leaking in."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("ZABD_")} | (env or {})
    return subprocess.run(
        [sys.executable, "-m", "zabd", *args], capture_output=True, text=True, timeout=timeout, env=clean, check=False
    )
