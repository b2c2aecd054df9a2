from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from zabd.client.spawn import LocalCluster


@pytest.fixture
def disk_cluster(tmp_path: Path) -> Iterator[Callable[..., LocalCluster]]:
    """Real server processes on real data dirs; every one stopped by PID afterwards."""
    made: list[LocalCluster] = []

    def make(n: int = 3, start: bool = True, **kw: Any) -> LocalCluster:
        kw.setdefault("storage", "disk")
        kw.setdefault("tick_ms", 5)
        c = LocalCluster(n, base_dir=tmp_path / f"cluster{len(made)}", **kw)
        made.append(c)
        if start:
            c.start()
        else:
            c.write_configs()
        return c

    try:
        yield make
    finally:
        for c in made:
            c.stop()
