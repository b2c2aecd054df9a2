"""TLS for both ports, and who is on the other end.

Peers always authenticate each other (mutual TLS against the cluster's CA)
and a peer certificate must name the node it speaks for: a DNS name
``zabd-node-<id>`` in its subjectAltName (``zabd certs`` writes them). The
client port may ask for client certificates (``none``, ``optional``,
``required``); tokens are checked separately (``zabd.server.auth``).
TLS 1.2 at least; Python's defaults pick 1.3 when both ends have it.
"""

from __future__ import annotations

import ssl
from typing import Any

NODE_NAME = "zabd-node-{}"


def node_name(node: int) -> str:
    return NODE_NAME.format(node)


def server_context(ca: str, cert: str, key: str, client_certs: str = "required") -> ssl.SSLContext:
    """For a listening port. ``client_certs``: none, optional or required."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=ca)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert, key)
    ctx.verify_mode = {"none": ssl.CERT_NONE, "optional": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}[
        client_certs
    ]
    return ctx


def client_context(
    ca: str, cert: str | None = None, key: str | None = None, check_hostname: bool = True
) -> ssl.SSLContext:
    """For a connection we open: the server must present a certificate of the CA."""
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.check_hostname = check_hostname
    if cert is not None:
        ctx.load_cert_chain(cert, key)
    return ctx


def cert_names(peercert: dict[str, Any] | None) -> set[str]:
    """The DNS names and IP addresses a verified certificate names."""
    if not peercert:
        return set()
    return {value for kind, value in peercert.get("subjectAltName", ()) if kind in ("DNS", "IP Address")}


def identity_problem(peercert: dict[str, Any] | None, node: int) -> str | None:
    """Why a verified peer certificate may not speak for ``node``, or None."""
    if not peercert:
        return "no certificate"
    names = cert_names(peercert)
    if node_name(node) not in names:
        return f"its certificate names {sorted(names) or 'nothing'}, not {node_name(node)}"
    return None
