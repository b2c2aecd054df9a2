"""The users of ZooKeeper's SASL DIGEST-MD5, read from a JAAS file as
ZooKeeper's ``SaslServerCallbackHandler`` reads them.

A JAAS file holds named sections of login modules, each with options::

    Server {
        org.apache.zookeeper.server.auth.DigestLoginModule required
        user_super="adminsecret"
        user_bob="bobsecret";
    };

ZooKeeper's server reads the ``Server`` section: every option named
``user_<name>`` of any of its modules is a user ``<name>`` with that
password (a later one of the same name wins, as in Java's option map); the
module's class is not looked at. Other sections (``Client``, ``QuorumServer``,
...) are parsed and ignored, so one file can serve both. Comments are
``//``, ``/* */`` and ``#``; a value is a quoted string (``\\"``, ``\\\\``,
``\\n``, ``\\t`` escapes) or a bare word, as Java's JAAS parser takes them.

``load_users`` raises ``JaasError`` with one line naming the file, the line
and what was expected; the message never holds a password.
"""

from __future__ import annotations

import re
from pathlib import Path

SECTION = "Server"  # ZooKeeper's default zookeeper.sasl.serverconfig
USER_PREFIX = "user_"
FLAGS = frozenset({"required", "requisite", "sufficient", "optional"})
MAX_FILE = 1 << 20  # a JAAS file is a few lines; a bigger one is not what was meant

# Java's JAAS tokenizer: words of letters, digits and . $ _ - * (a class name is a word)
_WORD = re.compile(r"[A-Za-z0-9.$_\-*\u0080-\uffff]+")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", "\\": "\\", '"': '"', "'": "'"}


class JaasError(ValueError):
    """A JAAS file that cannot serve: one line naming the file, the line and the problem."""


class _Tokens:
    """Words, quoted strings and the punctuation ``{ } ; =``, each with its line."""

    def __init__(self, path: str, text: str) -> None:
        self.path = path
        self.items: list[tuple[str, str, int]] = []  # (kind: word|string|punct, text, line)
        self.pos = 0
        self._scan(text)

    def fail(self, line: int, what: str) -> JaasError:
        return JaasError(f"{self.path}: line {line}: {what}")

    def _scan(self, text: str) -> None:
        i, line, n = 0, 1, len(text)
        while i < n:
            c = text[i]
            if c == "\n":
                line += 1
                i += 1
            elif c.isspace():
                i += 1
            elif text.startswith("//", i) or c == "#":
                while i < n and text[i] != "\n":
                    i += 1
            elif text.startswith("/*", i):
                end = text.find("*/", i + 2)
                if end < 0:
                    raise self.fail(line, "a /* comment is not closed")
                line += text.count("\n", i, end)
                i = end + 2
            elif c in "{};=":
                self.items.append(("punct", c, line))
                i += 1
            elif c == '"':
                start_line = line
                out: list[str] = []
                i += 1
                while True:
                    if i >= n:
                        raise self.fail(start_line, "a quoted value is not closed")
                    c = text[i]
                    if c == '"':
                        i += 1
                        break
                    if c == "\\" and i + 1 < n:
                        out.append(_ESCAPES.get(text[i + 1], text[i + 1]))
                        i += 2
                        continue
                    if c == "\n":
                        line += 1
                    out.append(c)
                    i += 1
                self.items.append(("string", "".join(out), start_line))
            else:
                m = _WORD.match(text, i)
                if m is None:
                    raise self.fail(line, f"unexpected character {c!r}")
                self.items.append(("word", m.group(), line))
                i = m.end()

    def line(self) -> int:
        if self.pos < len(self.items):
            return self.items[self.pos][2]
        return self.items[-1][2] if self.items else 1

    def peek(self) -> tuple[str, str] | None:
        if self.pos < len(self.items):
            kind, text, _ = self.items[self.pos]
            return kind, text
        return None

    def take(self, what: str, kinds: tuple[str, ...], text: str | None = None) -> str:
        got = self.peek()
        if got is None or got[0] not in kinds or (text is not None and got[1] != text):
            seen = "the end of the file" if got is None else repr(got[1])
            raise self.fail(self.line(), f"expected {what}, got {seen}")
        self.pos += 1
        return got[1]


def parse(path: str, text: str) -> dict[str, list[dict[str, str]]]:
    """Every section's modules' options: ``{section: [{option: value}, ...]}``."""
    t = _Tokens(path, text)
    sections: dict[str, list[dict[str, str]]] = {}
    while t.peek() is not None:
        name = t.take("a section name", ("word",))
        t.take("'{'", ("punct",), "{")
        modules: list[dict[str, str]] = []
        while t.peek() != ("punct", "}"):
            t.take("a login module class name or '}'", ("word",))
            flag = t.take("a flag (required, requisite, sufficient or optional)", ("word",))
            if flag.lower() not in FLAGS:
                raise t.fail(t.items[t.pos - 1][2], f"expected a flag (required, requisite, sufficient or "
                                                     f"optional), got {flag!r}")
            options: dict[str, str] = {}
            while t.peek() != ("punct", ";"):
                key = t.take("an option name or ';'", ("word",))
                t.take(f"'=' after option {key!r}", ("punct",), "=")
                options[key] = t.take(f"a value for option {key!r}", ("word", "string"))
            t.take("';'", ("punct",), ";")
            modules.append(options)
        t.take("'}'", ("punct",), "}")
        t.take("';' after the section's '}'", ("punct",), ";")
        sections.setdefault(name, []).extend(modules)  # Java merges a section named twice
    return sections


def users_of(path: str, text: str) -> dict[str, str]:
    """The DIGEST-MD5 users (name -> password) of the ``Server`` section."""
    sections = parse(path, text)
    if SECTION not in sections:
        found = ", ".join(sorted(sections)) or "none"
        raise JaasError(f"{path}: no '{SECTION}' section (ZooKeeper's server section); sections found: {found}")
    users: dict[str, str] = {}
    for options in sections[SECTION]:
        for key, value in options.items():
            if key.startswith(USER_PREFIX) and len(key) > len(USER_PREFIX):
                users[key[len(USER_PREFIX):]] = value
    if not users:
        raise JaasError(f"{path}: the '{SECTION}' section has no user_<name>=\"<password>\" option; zabd serves "
                        "SASL DIGEST-MD5 only (no Kerberos/GSSAPI)")
    return users


def load_users(path: str) -> dict[str, str]:
    """``users_of`` the file at ``path`` (JaasError when it cannot be read or parsed)."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_FILE + 1)
    except OSError as exc:
        raise JaasError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if len(raw) > MAX_FILE:
        raise JaasError(f"{path}: larger than {MAX_FILE} bytes; expected a JAAS file of a few lines")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise JaasError(f"{path}: not UTF-8 (byte {exc.start})") from None
    return users_of(str(Path(path)), text)
