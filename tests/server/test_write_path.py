"""CONTRIBUTING.md's path of one setData is the path the code takes: each row
is a call a traced setData makes, in the rows' order, and no module appears
twice in one phase of it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def documented() -> list[tuple[str, str, str]]:
    text = (ROOT / "CONTRIBUTING.md").read_text()
    block = text.split("<!-- write-path: begin -->")[1].split("<!-- write-path: end -->")[0]
    rows = re.findall(r"^\| (in|core|out) \| `([\w.]+)` \| `([\w.]+)` \|", block, re.M)
    assert len(rows) >= 15, f"the table has {len(rows)} rows"
    return rows


def traced() -> list[tuple[str, str, str]]:
    # pure Python: the compiled modules make no calls a profiler sees
    env = dict(os.environ, ZABD_PURE="1")
    out = subprocess.run([sys.executable, "-m", "tests.server.write_path"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=120, check=True).stdout
    calls = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] in ("in", "core", "out"):
            calls.append((parts[0], parts[1], parts[2]))
    return calls


def test_the_documented_set_data_path_is_the_traced_one() -> None:
    rows = documented()
    calls = traced()
    assert calls, "the trace saw no call"
    at = 0
    for row in rows:
        try:
            at = calls.index(row, at) + 1
        except ValueError:
            raise AssertionError(f"{row} is not a call the setData makes after the rows before it") from None
    for phase in ("in", "core", "out"):
        modules = [m for p, m, _ in rows if p == phase]
        assert len(modules) == len(set(modules)), f"a module twice in phase {phase}: {modules}"
