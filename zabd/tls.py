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


# what a peer that is not speaking TLS at all makes OpenSSL say
_NOT_TLS = frozenset({"WRONG_VERSION_NUMBER", "HTTP_REQUEST", "HTTPS_PROXY_REQUEST", "UNKNOWN_PROTOCOL",
                      "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG"})


def describe_error(exc: BaseException, timeout: float | None = None) -> str:
    """One short line for a failed TLS handshake (for logs and CLI errors)."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"certificate verify failed: {exc.verify_message}"
    if isinstance(exc, ssl.SSLError):
        reason = exc.reason or ""
        if reason in _NOT_TLS:
            return f"not a TLS handshake (plaintext on a TLS port?): {reason}"
        return reason.lower().replace("_", " ") if reason else (str(exc) or type(exc).__name__)
    if isinstance(exc, TimeoutError):
        return f"no TLS handshake within {timeout:g} s" if timeout else "TLS handshake timed out"
    return f"connection lost during the TLS handshake ({exc or type(exc).__name__})"


def client_tls(ca: str | None, cert: str | None = None, key: str | None = None) -> ssl.SSLContext | None:
    """The context for a client's ``--ca/--cert/--key`` (None: plaintext).
    Without ``ca`` the system's trusted CAs are used. Raises ValueError with
    one line naming the option and the file."""
    if not (ca or cert or key):
        return None
    if key and not cert:
        raise ValueError(f"--key {key!r}: needs --cert (the certificate the key belongs to)")
    for flag, path in (("--ca", ca), ("--cert", cert), ("--key", key)):
        if path:
            try:
                with open(path, "rb"):
                    pass
            except OSError as exc:
                raise ValueError(f"{flag} {path!r}: cannot read the file ({exc.strerror or exc})") from None
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        if ca:
            ctx.load_verify_locations(cafile=ca)
        if cert:
            ctx.load_cert_chain(cert, key or None)
    except ssl.SSLError as exc:
        problem = describe_error(exc)
        raise ValueError(f"--ca/--cert/--key: not a usable PEM CA, certificate or key ({problem})") from None
    return ctx


def tls_files_problem(ca: str, cert: str, key: str) -> str | None:
    """Why a server's CA, certificate and key cannot serve (one line naming
    the field), or None."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        ctx.load_verify_locations(cafile=ca)
    except (ssl.SSLError, ValueError) as exc:
        return f"field 'tls_ca' = {ca!r}: expected a PEM CA bundle ({describe_error(exc)})"
    try:
        ctx.load_cert_chain(cert, key)
    except ssl.SSLError as exc:
        return (f"field 'tls_cert' = {cert!r} / 'tls_key' = {key!r}: expected a PEM certificate and its private key "
                f"({describe_error(exc)})")
    return None
