"""``zabd certs``: a CA and certificates for a cluster (quick starts and tests).

    zabd certs --out DIR --nodes 3 [--hosts h1,h2,h3] [--clients 1] [--days 825]

Writes ``ca.pem``/``ca.key``, ``node<i>.pem``/``node<i>.key`` for each node
(subjectAltName: ``zabd-node-<i>``, ``localhost``, 127.0.0.1 and the node's
host, which the peer identity check and clients use) and
``client<j>.pem``/``client<j>.key`` for client certificates. ECDSA P-256 keys,
written readable by their owner only. Made with ``cryptography``; for
production, use your own CA and put ``zabd-node-<i>`` in each node's SAN.
"""

from __future__ import annotations

import argparse
import datetime
import ipaddress
import os
import sys
from pathlib import Path
from typing import NoReturn

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from zabd.tls import node_name


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write(path: Path, data: bytes, private: bool = False) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def make_ca(
    out: Path, name: str = "zabd cluster CA", days: int = 825
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _key()
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .sign(key, hashes.SHA256())
    )
    out.mkdir(parents=True, exist_ok=True)
    _write(out / "ca.pem", cert.public_bytes(serialization.Encoding.PEM))
    _write(out / "ca.key", _pem_key(key), private=True)
    return cert, key


def make_cert(
    out: Path,
    stem: str,
    common_name: str,
    names: list[str],
    ca: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    days: int = 825,
) -> None:
    key = _key()
    now = datetime.datetime.now(datetime.UTC)
    alt: list[x509.GeneralName] = []
    for n in names:
        try:
            alt.append(x509.IPAddress(ipaddress.ip_address(n)))
        except ValueError:
            alt.append(x509.DNSName(n))
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName(alt), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    _write(out / f"{stem}.pem", cert.public_bytes(serialization.Encoding.PEM))
    _write(out / f"{stem}.key", _pem_key(key), private=True)


def make_cluster(out: Path, nodes: int, hosts: list[str] | None = None, clients: int = 1, days: int = 825) -> None:
    ca, ca_key = make_ca(out, days=days)
    for i in range(1, nodes + 1):
        names = [node_name(i), "localhost", "127.0.0.1"]
        if hosts and i <= len(hosts) and hosts[i - 1] not in names:
            names.append(hosts[i - 1])
        make_cert(out, f"node{i}", node_name(i), names, ca, ca_key, days)
    for j in range(1, clients + 1):
        make_cert(out, f"client{j}", f"zabd-client-{j}", [f"zabd-client-{j}"], ca, ca_key, days)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        print(f"zabd certs: {message}", file=sys.stderr)
        raise SystemExit(2)


def _owner(p: _Parser, text: str) -> tuple[int, int]:
    uid, _, gid = text.partition(":")
    if not uid.isdigit() or (gid and not gid.isdigit()):
        p.error(f"--owner {text!r}: expected UID or UID:GID (numbers)")
    return int(uid), int(gid or uid)


def main(argv: list[str]) -> int:
    p = _Parser(prog="zabd certs", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="directory to write the PEM files into")
    p.add_argument("--nodes", type=int, required=True, help="number of nodes (1..255)")
    p.add_argument("--hosts", default="", help="comma-separated host name or IP of each node, in id order")
    p.add_argument("--clients", type=int, default=1, help="client certificates to write (default 1)")
    p.add_argument("--days", type=int, default=825)
    p.add_argument("--owner", help="UID[:GID] to own the files (root only), e.g. 10001 for the container image")
    args = p.parse_args(argv)
    owner = _owner(p, args.owner) if args.owner else None
    if not 1 <= args.nodes <= 255:
        p.error(f"--nodes {args.nodes}: expected 1..255")
    if args.clients < 0:
        p.error(f"--clients {args.clients}: expected 0 or more")
    if args.days < 1:
        p.error(f"--days {args.days}: expected 1 or more")
    hosts = [h.strip() for h in args.hosts.split(",") if h.strip()]
    if hosts and len(hosts) != args.nodes:
        p.error(f"--hosts: {len(hosts)} hosts for {args.nodes} nodes; expected one per node")
    out = Path(args.out)
    try:
        make_cluster(out, args.nodes, hosts, args.clients, args.days)
        if owner is not None:
            for f in out.iterdir():
                if f.suffix in (".pem", ".key"):
                    os.chown(f, *owner)
    except OSError as exc:
        print(f"zabd certs: cannot write {out}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    print(f"wrote ca.pem, node1..{args.nodes}.pem and client certificates to {out}")
    return 0
