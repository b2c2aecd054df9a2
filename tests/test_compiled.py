"""The core runs compiled (mypyc, scripts/build_compiled.py) or as pure
Python, and both must pass the same tests: the default run uses whichever is
in use, and this runs the core's and the simulator's tests with the other.
A source edited after the build makes the whole set load from the sources."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import zabd.protocol.node
from zabd import compiled

ROOT = Path(__file__).resolve().parent.parent
built = (ROOT / compiled.MANIFEST).exists()


def probe(tree: Path, **env: str) -> tuple[str, str]:
    """(describe(), where zabd.protocol.node came from) in a fresh interpreter."""
    out = subprocess.run(
        [sys.executable, "-c", "import zabd.compiled as c, zabd.protocol.node as n; print(c.describe()); "
         "print(n.__file__)"],
        env={**os.environ, "PYTHONPATH": str(tree), **env}, cwd=tree, capture_output=True, text=True, check=True)
    state, origin = out.stdout.strip().splitlines()
    return state, origin


def test_the_loaded_core_is_the_one_described() -> None:
    origin = zabd.protocol.node.__file__ or ""
    assert compiled.in_use() == (not origin.endswith(".py")), (compiled.describe(), origin)


@pytest.mark.skipif(not built, reason="the compiled core is not built here (no C compiler when installing?)")
def test_an_edited_source_or_zabd_pure_loads_every_module_from_source(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    shutil.copytree(ROOT / "zabd", tree / "zabd", ignore=shutil.ignore_patterns("__pycache__"))
    state, origin = probe(tree)
    assert state == "compiled with mypyc" and origin.endswith(".so")
    state, origin = probe(tree, ZABD_PURE="1")
    assert state == "pure Python (ZABD_PURE is set)" and origin.endswith("node.py")
    os.utime(tree / "zabd/protocol/rand.py")  # touched, not changed: still the compiled set
    assert probe(tree)[0] == "compiled with mypyc"
    with open(tree / "zabd/protocol/rand.py", "a") as f:
        f.write("\n# an edit after the build\n")
    state, origin = probe(tree)
    assert state.startswith("pure Python (zabd.protocol.rand changed since the build") and origin.endswith("node.py")


@pytest.mark.skipif(not built, reason="the compiled core is not built here: the default run is the pure one")
def test_the_compiled_modules_tests_pass_on_the_pure_core_too() -> None:
    # the core, the simulator, and the codecs, trees and log records a server's write path runs compiled
    other = {"ZABD_PURE": "1"} if compiled.in_use() else {}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", "tests/protocol",
                          "tests/sim", "tests/kv", "tests/codec", "tests/storage"],
                         env={**os.environ, **other}, cwd=ROOT, capture_output=True, text=True)
    tail = run.stdout.strip().splitlines()[-1:]
    assert run.returncode == 0, run.stdout[-3000:]
    assert tail and " passed" in tail[0] and "failed" not in tail[0], tail
