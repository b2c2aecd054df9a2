"""Compile the protocol core and the simulator with mypyc, in place.

    python3 scripts/build_compiled.py [--clean]

The extension modules land beside their sources (``zabd/protocol/node.*.so``
...) with one shared library, ``zabd/native__mypyc.*.so``; Python imports
them instead of the ``.py`` files. ``zabd/compiled.txt`` records the hash
of every source compiled: ``zabd.compiled`` uses the extensions only while
every source still has that hash, and the pure-Python modules otherwise (or
when ``ZABD_PURE=1``). ``--clean`` removes what a build left. Needs a C
compiler and mypy (the test extra); ``scripts/install.sh`` runs this when
``cc`` is present.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import sysconfig
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from zabd.compiled import GROUP, MANIFEST, MODULES  # noqa: E402


def sources() -> list[Path]:
    return [ROOT / (name.replace(".", "/") + ".py") for name in MODULES]


def clean() -> int:
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    removed = 0
    # every extension under zabd/ is one of ours: also those of a module since taken off the list,
    # which Python would otherwise still import (and fail to, without its part of the shared library)
    for path in [*(ROOT / "zabd").rglob("*" + suffix), ROOT / MANIFEST]:
        if path.exists():
            path.unlink()
            removed += 1
    shutil.rmtree(ROOT / "build" / "mypyc", ignore_errors=True)
    return removed


def main(argv: list[str]) -> int:
    if argv == ["--clean"]:
        print(f"build_compiled: removed {clean()} files")
        return 0
    if argv:
        print(f"build_compiled: unexpected arguments {argv}; expected none or --clean", file=sys.stderr)
        return 2
    try:
        from mypyc.build import mypycify
        from setuptools import setup
    except ImportError as exc:
        print(f"build_compiled: {exc.name} is not installed (pip install mypy setuptools)", file=sys.stderr)
        return 1
    clean()
    t0 = time.monotonic()
    paths = [str(p.relative_to(ROOT)) for p in sources()]
    os.chdir(ROOT)
    ext = mypycify(paths, opt_level="3", group_name=GROUP, target_dir="build/mypyc")
    setup(name="zabd-compiled", ext_modules=ext, script_args=["-q", "build_ext", "--inplace", "-b", "build/mypyc"],
          packages=[])
    # "mypyc", then a line per module: name, size, mtime (ns) and sha256 of the source compiled
    lines = ["mypyc"]
    for name, p in zip(MODULES, sources(), strict=True):
        st = p.stat()
        lines.append(f"{name} {st.st_size} {st.st_mtime_ns} {hashlib.sha256(p.read_bytes()).hexdigest()}")
    (ROOT / MANIFEST).write_text("\n".join(lines) + "\n")
    print(f"build_compiled: {len(MODULES)} modules compiled with mypyc in {time.monotonic() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
