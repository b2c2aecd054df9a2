"""Shared helpers for the storage tests: valid ZAB histories and file surgery."""

from __future__ import annotations

import os

from zabd.protocol.messages import Txn


def z(epoch: int, counter: int) -> int:
    return epoch << 32 | counter


def run(epoch: int, first: int, last: int, tag: bytes = b"") -> list[Txn]:
    """Txns (epoch, first..last) with distinct payloads."""
    return [Txn(z(epoch, c), b"%s-%d-%d" % (tag, epoch, c)) for c in range(first, last + 1)]


def flip_byte(path: str, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x5A]))
        f.flush()
        os.fsync(f.fileno())


def segments(data_dir: str) -> list[str]:
    d = os.path.join(data_dir, "log")
    return sorted(os.path.join(d, n) for n in os.listdir(d) if n.endswith(".log"))
