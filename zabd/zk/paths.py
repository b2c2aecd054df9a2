"""ZooKeeper's path rules (``PathUtils.validatePath``), code point by code
point, so a path zabd accepts is one ZooKeeper accepts and vice versa."""

from __future__ import annotations

import re

from zabd.zk.errors import Code, ZKError

# Most paths have no dot-only names and no odd characters: one regex match
# accepts them; everything else takes the character-by-character rules.
# (re reads the escapes: mypyc refuses surrogates in string literals)
_PLAIN = re.compile(r"(?:/[^/\x00-\x1f\x7f-\x9f\ud800-\uf8ff\ufff0-\U0010ffff]+)+")


def _bad_char(c: str) -> bool:
    o = ord(c)
    # Java checks UTF-16 units: a code point above U+FFFF is a surrogate pair
    # there, and surrogates are refused.
    return (
        0 < o <= 0x1F
        or 0x7F <= o <= 0x9F
        or 0xD800 <= o <= 0xF8FF
        or o >= 0xFFF0
    )


def problem(path: str) -> str | None:
    """Why ``path`` is not a valid znode path, or None if it is."""
    if _PLAIN.fullmatch(path) is not None and "/." not in path:
        return None
    if not path:
        return "path length must be > 0"
    if path[0] != "/":
        return "path must start with / character"
    n = len(path)
    if n == 1:
        return None
    if path[-1] == "/":
        return "path must not end with / character"
    last = "/"
    for i in range(1, n):
        c = path[i]
        if c == "\0":
            return f"null character not allowed @{i}"
        if c == "/" and last == "/":
            return f"empty node name specified @{i}"
        if c == "." and last == "." and path[i - 2] == "/" and (i + 1 == n or path[i + 1] == "/"):
            return f"relative paths not allowed @{i}"
        if c == "." and last == "/" and (i + 1 == n or path[i + 1] == "/"):
            return f"relative paths not allowed @{i}"
        if _bad_char(c):
            return f"invalid character @{i}"
        last = c
    return None


def validate(path: str) -> None:
    """ZKError(BAD_ARGUMENTS) unless ``path`` is valid."""
    if problem(path) is not None:
        raise ZKError(Code.BAD_ARGUMENTS, path)


def parent_of(path: str) -> str:
    """The parent of a non-root path ("/" for "/a")."""
    i = path.rindex("/")
    return path[:i] if i else "/"


def child_path(parent: str, name: str) -> str:
    return "/" + name if parent == "/" else parent + "/" + name


def name_of(path: str) -> str:
    return path[path.rindex("/") + 1 :]
