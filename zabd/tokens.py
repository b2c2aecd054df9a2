"""Client tokens: the file ``auth_tokens_file`` names, one ``TOKEN role`` a
line, and the roles a token may carry.

Read by the config model (a bad file is a config error at start) and by the
server's authenticator (``zabd.server.auth``); the launchers write it.
"""

from __future__ import annotations

from pathlib import Path

RW = "rw"
RO = "ro"
ADMIN = "admin"
ROLES = (RO, RW, ADMIN)


class TokenFileError(ValueError):
    """A bad tokens file: one line naming the file, the line and the problem."""


def load_tokens(path: str) -> dict[str, str]:
    """``TOKEN ro|rw|admin`` a line; blank lines and ``#`` comments are skipped."""
    tokens: dict[str, str] = {}
    for n, line in enumerate(Path(path).read_text().splitlines(), start=1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        role = parts[1] if len(parts) == 2 else ""
        if role not in ROLES or len(parts[0]) < 8:
            raise TokenFileError(
                f"{path}: line {n}: expected 'TOKEN ro', 'TOKEN rw' or 'TOKEN admin' with a token of at least "
                "8 characters"
            )
        tokens[parts[0]] = role
    return tokens
