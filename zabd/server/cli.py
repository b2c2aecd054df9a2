"""``zabd serve --config FILE``: run one replica until SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import ssl
import sys
from typing import Any, NoReturn

from zabd.config import ConfigError, ServerConfig, load_config
from zabd.storage.txnlog import StorageError
from zabd.tokens import TokenFileError
from zabd.zk.jaas import JaasError


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        print(f"zabd serve: {message}", file=sys.stderr)
        raise SystemExit(2)


def _data_dir_error(config: ServerConfig, exc: OSError) -> str:
    where = f" ({exc.filename})" if exc.filename and exc.filename != config.data_dir else ""
    reason = f"{exc.strerror or exc}{where}"
    if os.path.exists(config.data_dir) and not os.path.isdir(config.data_dir):
        reason = "it exists and is not a directory"
    return (
        f"zabd serve: config error: field 'data_dir' = {config.data_dir!r}: expected a directory this user "
        f"can create and write; {reason}"
    )


async def _run(config: ServerConfig) -> int:
    from zabd.server.replica import Replica
    from zabd.server.storage_factory import open_state_machine, open_storage

    try:
        storage = open_storage(config.storage_options())
    except OSError as exc:
        # a file where the folder should be, a path under /proc, no permission: a config mistake
        print(_data_dir_error(config, exc), file=sys.stderr)
        return 2
    try:
        replica = Replica(config, storage, open_state_machine(config))
    except StorageError as exc:
        # a damaged or inconsistent data dir: one line (file, offset, what), no traceback
        print(f"zabd serve: cannot recover {config.data_dir!r}: {exc}", file=sys.stderr)
        storage.close()
        return 1
    except TokenFileError as exc:
        print(f"zabd serve: config error: auth_tokens_file: {exc}", file=sys.stderr)
        storage.close()
        return 2
    except JaasError as exc:  # the file changed since the config was checked
        print(f"zabd serve: config error: zk_sasl_jaas: {exc}", file=sys.stderr)
        storage.close()
        return 2
    except ssl.SSLError as exc:
        print(f"zabd serve: config error: tls_cert/tls_key/tls_ca: not a usable certificate, key or CA ({exc})",
              file=sys.stderr)
        storage.close()
        return 2
    except OSError as exc:  # after ssl.SSLError, an OSError too
        # recovery opens and creates files in data_dir (e.g. a read-only folder); other files
        # named by the config (certificates) fail here too
        name = os.fsdecode(exc.filename) if exc.filename else ""
        in_data_dir = not name or os.path.abspath(name).startswith(os.path.abspath(config.data_dir))
        print(_data_dir_error(config, exc) if in_data_dir else f"zabd serve: cannot open {name}: {exc.strerror or exc}",
              file=sys.stderr)
        storage.close()
        return 2
    try:
        await replica.start()
    except OSError as exc:
        replica.log.error("cannot listen", error=str(exc))
        print(f"zabd serve: cannot listen: {exc}", file=sys.stderr)
        storage.close()
        return 1
    loop = asyncio.get_running_loop()

    def on_error(_: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        replica.log.error(
            "unhandled error in the event loop",
            message=context.get("message"),
            error=f"{type(exc).__name__}: {exc}" if exc else None,
        )

    loop.set_exception_handler(on_error)
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, lambda: asyncio.ensure_future(replica.shutdown()))
    await replica.wait_stopped()
    return 1 if replica.fatal is not None else 0


def serve_main(argv: list[str]) -> int:
    parser = _Parser(prog="zabd serve", description="run a zabd replica")
    parser.add_argument("--config", help="TOML file; ZABD_* environment variables override its fields")
    parser.add_argument("--log-format", choices=("json", "console"), help="log line format (default: json)")
    parser.add_argument("--log-level", choices=("debug", "info", "warning", "error"))
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"zabd serve: {exc}", file=sys.stderr)
        return 2
    updates = {}
    if args.log_format:
        updates["log_format"] = args.log_format
    if args.log_level:
        updates["log_level"] = args.log_level
    if updates:
        config = config.model_copy(update=updates)

    from zabd.server import zlog

    zlog.configure(config.log_format, config.log_level)
    try:
        import uvloop

        return uvloop.run(_run(config))
    except ConfigError as exc:
        print(f"zabd serve: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
