#!/usr/bin/env python3
"""Regenerate the compose files: docker-compose.yml (3 nodes, repo root),
deploy/docker-compose.{5,7}.yml, deploy/docker-compose.tls.yml (3 nodes,
TLS on) and deploy/docker-compose.grow5.yml (the 3-node cluster and two nodes
to add live). Same as `zabd compose --nodes N [--tls] -o FILE`."""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from zabd.client.compose import main

if __name__ == "__main__":
    root = Path(__file__).resolve().parent.parent
    if len(sys.argv) > 1:
        raise SystemExit(main(sys.argv[1:]))
    for n, path, extra in (
        (3, root / "docker-compose.yml", []),
        (5, root / "deploy/docker-compose.5.yml", []),
        (7, root / "deploy/docker-compose.7.yml", []),
        (3, root / "deploy/docker-compose.tls.yml", ["--tls"]),
        (5, root / "deploy/docker-compose.grow5.yml", ["--members", "3"]),
    ):
        # the build context is the repository root, as seen from the file's folder
        context = os.path.relpath(root, path.parent)
        main(["--nodes", str(n), "-o", str(path), "--build-context", context, *extra])
        print(f"wrote {path}")
