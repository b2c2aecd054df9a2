"""``zabd`` command dispatcher.

Each subcommand lives in its own module and is imported only when used, so
``zabd sim`` starts without loading asyncio, pydantic or Spark.
"""

from __future__ import annotations

import importlib
import os
import sys

# name -> (module, function, one-line help)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "sim": ("zabd.sim.cli", "main", "run the deterministic simulator and print the canonical digest"),
    "serve": ("zabd.server.cli", "serve_main", "run a replica server"),
    "propose": ("zabd.client.cli", "propose_main", "submit a proposal to a cluster"),
    "status": ("zabd.client.cli", "status_main", "show a server's status"),
    "reconfig": ("zabd.client.cli", "reconfig_main", "change the membership: add, observe or remove nodes"),
    "kv": ("zabd.client.kv_cli", "main", "key-value calls: put, get [--sync], cas, delete, sync"),
    "log": ("zabd.client.cli", "log_main", "read committed transactions; 'log dump|verify DIR' inspects a data dir"),
    "cluster": ("zabd.client.cluster_cli", "main", "run a local cluster in the foreground until Ctrl-C"),
    "bench": ("zabd.client.bench", "main", "load generator (optionally spawning a local cluster)"),
    "certs": ("zabd.certs", "main", "write a CA and one TLS certificate per node (and client certificates)"),
    "compose": ("zabd.client.compose", "main", "write docker-compose files for N nodes"),
    "import-zookeeper": ("zabd.migrate.cli", "import_main",
                         "read a ZooKeeper data directory into new zabd data directories"),
    "export-zookeeper": ("zabd.migrate.cli", "export_main",
                         "write a zabd data directory as a ZooKeeper data directory ZooKeeper 3.8 loads"),
    "mirror": ("zabd.migrate.cli", "mirror_main",
               "follow a live ZooKeeper ensemble as an observer into new zabd data directories, then cut over"),
    "pipeline": ("zabd.pipeline.cli", "main", "Spark sweeps of simulated scenarios and audits of real logs"),
    "nemesis": ("zabd.nemesis.cli", "main", "Jepsen-style fault runs against real servers, checked"),
}


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("zabd")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def usage() -> str:
    lines = ["usage: zabd COMMAND [ARGS...]   (zabd --version; zabd COMMAND --help)", "", "commands:"]
    for name, (_, _, text) in COMMANDS.items():
        lines.append(f"  {name:<10} {text}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help", "help"):
        print(usage())
        return 0 if args else 2
    if args[0] in ("--version", "-V", "version"):
        from zabd.compiled import describe

        print(f"zabd {_version()}; core: {describe()}")
        return 0
    name = args[0]
    if name not in COMMANDS:
        print(f"zabd: unknown command {name!r}; expected one of {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    module_name, func_name, _ = COMMANDS[name]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        print(f"zabd {name}: not available ({exc})", file=sys.stderr)
        return 2
    func = getattr(module, func_name)
    try:
        result: int = func(args[1:])
        sys.stdout.flush()
    except BrokenPipeError:
        # the reader went away (``zabd status | head -1``): not an error of
        # ours; point stdout at /dev/null so the exit flush stays quiet
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    return result
