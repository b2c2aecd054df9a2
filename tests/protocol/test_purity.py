"""The core is pure: it imports no asyncio, sockets, clock, randomness or disk."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import zabd.protocol

FORBIDDEN = {
    "asyncio", "socket", "selectors", "ssl", "time", "datetime", "random", "secrets", "os", "io", "pathlib",
    "shutil", "tempfile", "threading", "multiprocessing", "subprocess", "signal", "uvloop", "msgpack", "structlog",
    "pydantic", "mmap", "fcntl",
}
CORE = Path(zabd.protocol.__file__).parent


def test_core_sources_import_nothing_impure() -> None:
    for path in sorted(CORE.glob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                root = name.split(".")[0]
                assert root not in FORBIDDEN, f"{path.name} imports {name}"
                if root == "zabd":
                    assert name.startswith("zabd.protocol"), f"{path.name} imports {name} outside the core"
        assert "open(" not in path.read_text(), f"{path.name} opens files"


def test_importing_the_core_loads_no_io_module() -> None:
    code = (
        "import sys; before = set(sys.modules); import zabd.protocol; "
        "added = {m.split('.')[0] for m in set(sys.modules) - before}; "
        f"print(sorted(added & set({sorted(FORBIDDEN)!r})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
