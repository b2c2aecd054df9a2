"""The members' peer addresses, as a membership change carries them.

``Membership.extra`` (``zabd.protocol.membership``) is the driver's part of a
change; the server puts every member's spec there, so that each node learns
where a new member listens from the change itself: ``id=SPEC`` entries,
comma-separated, ASCII, where SPEC is the quorum ``host:port`` or ZooKeeper's
``host:quorumport:electionport[:role][;[clienthost:]clientport]`` (kept as
given; ``/zookeeper/config`` shows it in ZooKeeper's own form, ``spec_line``).

zabd runs election and broadcast on one peer link: a node dials a peer's
quorum port only. A distinct election port in a node's own spec is one more
port on which it accepts the same links (``zabd.server.transport``), so that
both ports ZooKeeper's clients read in ``/zookeeper/config`` are real.
"""

from __future__ import annotations

from typing import NamedTuple

ROLES = ("participant", "observer")
WILDCARDS = frozenset({"0.0.0.0", "::", "0:0:0:0:0:0:0:0", ""})
EXPECTED = "expected host:port or host:quorumport:electionport[:participant|observer][;[clienthost:]clientport]"


class PeerSpec(NamedTuple):
    """One member's addresses. ``election`` is None for a bare ``host:port``
    (one peer port); ``role`` and the client address are None when not named."""

    host: str  # without the brackets of an IPv6 address
    quorum: int
    election: int | None
    role: str | None
    client_host: str | None
    client_port: int | None

    @property
    def quorum_addr(self) -> str:
        """``host:port`` of the quorum port, as ``parse_hostport`` reads it."""
        return f"{_bracketed(self.host)}:{self.quorum}"

    @property
    def client_addr(self) -> str | None:
        if self.client_port is None:
            return None
        return f"{_bracketed(self.client_host or '0.0.0.0')}:{self.client_port}"


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _port(text: str, what: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise ValueError(f"{what} {text!r} is not a port 1..65535; {EXPECTED}")
    return int(text)


def _host_and_rest(text: str) -> tuple[str, list[str]]:
    """``[v6]:a:b`` or ``host:a:b`` -> (host, [a, b])."""
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            raise ValueError(f"an IPv6 address is [addr]:port...; {EXPECTED}")
        return host, rest[1:].split(":") if rest else []
    parts = text.split(":")
    return parts[0], parts[1:]


def parse_spec(spec: str) -> PeerSpec:
    """A ``peers`` entry or a ZooKeeper server spec; ValueError (one line,
    saying what was expected; the caller names the spec) if it is neither. A bare ``host:port`` reads
    as today's one peer port, an unbracketed IPv6 ``::1:7000`` too."""
    if not spec.isascii() or "," in spec or "=" in spec or any(c.isspace() for c in spec):
        raise ValueError(EXPECTED)
    server, sep, client = spec.partition(";")
    host, rest = _host_and_rest(server)
    if not sep and not server.startswith("[") and (len(rest) < 2 or not rest[0].isdigit() or not rest[1].isdigit()):
        # host:port, with IPv6 hosts unbracketed as parse_hostport takes them
        host, colon, port = server.rpartition(":")
        if not colon or not host:
            raise ValueError(EXPECTED)
        return PeerSpec(host.strip("[]"), _port(port, "port"), None, None, None, None)
    if not host:
        raise ValueError(f"no host; {EXPECTED}")
    if len(rest) == 1 and not sep:
        return PeerSpec(host, _port(rest[0], "port"), None, None, None, None)
    if not 2 <= len(rest) <= 3:
        raise ValueError(EXPECTED)
    quorum, election = _port(rest[0], "quorum port"), _port(rest[1], "election port")
    if quorum == election:
        # ZooKeeper's QuorumPeerConfig refuses it, so /zookeeper/config would not parse
        raise ValueError("the quorum and election ports are the same; expected two ports, or host:port for "
                         "one peer port")
    role = None
    if len(rest) == 3:
        role = rest[2].lower()
        if role not in ROLES:
            raise ValueError(f"role {rest[2]!r} is not participant or observer")
    client_host: str | None = None
    client_port: int | None = None
    if sep:
        if client.count(":") == 0:
            client_host, client_port = "0.0.0.0", _port(client, "client port")
        else:
            chost, crest = _host_and_rest(client)
            if len(crest) != 1 or not chost:
                raise ValueError(f"the client address {client!r} is not [host:]port")
            client_host, client_port = chost, _port(crest[0], "client port")
    return PeerSpec(host, quorum, election, role, client_host, client_port)


def spec_line(spec: str, role: str) -> str:
    """A member's part of ``/zookeeper/config``, as ZooKeeper's
    ``QuorumServer.toString`` writes it: ``host:quorum:election:role``, then
    ``;clienthost:clientport`` if the spec names a client address. A bare
    ``host:port`` has one peer port: it is shown as both (ZooKeeper's parser
    refuses that; docs/zookeeper.md). A spec that does not parse (one an
    older zabd let into the log) is shown as given."""
    try:
        p = parse_spec(spec)
    except ValueError:
        return spec
    line = f"{_bracketed(p.host)}:{p.quorum}:{p.quorum if p.election is None else p.election}:{role}"
    client = p.client_addr
    return line if client is None else f"{line};{client}"


def encode_addresses(addresses: dict[int, str]) -> bytes:
    return ",".join(f"{i}={addresses[i]}" for i in sorted(addresses)).encode()


def decode_specs(data: bytes) -> dict[int, str]:
    """The members' specs in ``data``; ValueError if it is not such a list.
    Lenient on purpose: the log may hold what an older zabd took as a spec."""
    out: dict[int, str] = {}
    if not data:
        return out
    for item in data.decode("ascii").split(","):
        node, sep, spec = item.partition("=")
        if not sep or not node.isdigit() or spec.split(";")[0].count(":") < 1:
            raise ValueError(f"not a member address: {item!r}")
        out[int(node)] = spec
    return out


def quorum_address(spec: str) -> str:
    """``host:port`` of a spec (ZooKeeper's: its quorum port)."""
    try:
        return parse_spec(spec).quorum_addr
    except ValueError:
        return ":".join(spec.split(";")[0].split(":")[:2])


def decode_addresses(data: bytes) -> dict[int, str]:
    """The members' quorum ``host:port``; ValueError if ``data`` is not a list."""
    return {node: quorum_address(spec) for node, spec in decode_specs(data).items()}


def zookeeper_config_text(
    voters: frozenset[int], observers: frozenset[int], specs: dict[int, str], version: int
) -> bytes:
    """``/zookeeper/config`` as ZooKeeper writes it: a ``server.N=`` line a
    member (``spec_line``, the role the membership gives it), then
    ``version=`` in hex."""
    lines = []
    for node in sorted(voters | observers):
        role = "observer" if node in observers else "participant"
        lines.append(f"server.{node}={spec_line(specs.get(node, ''), role)}")
    lines.append(f"version={version:x}")
    return "\n".join(lines).encode()
