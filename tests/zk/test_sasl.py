"""SASL DIGEST-MD5 as ZooKeeper 3.8 serves it, driven with bytes (no socket),
and the JAAS file its users come from.

The vectors: RFC 2831's own example, and an exchange with Debian's ZooKeeper
3.8.0 (Java's DigestMD5Server) recorded with a fixed cnonce: the same
response and the same rspauth must come out here. pure-sasl (kazoo's SASL
library) is the client the rest is checked against.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from puresasl.client import SASLClient

from tests.kazoo_suite.zabd_cluster import JAAS_DIGEST as HARNESS_JAAS
from zabd.zk.acl import ACL, ALL, READ, SUPER, Id, allowed, fixup
from zabd.zk.errors import ZKError
from zabd.zk.jaas import JaasError, load_users, parse, users_of
from zabd.zk.sasl import MAX_TOKEN, DigestMD5Server, SaslError, parse_directives, response_value

USERS = {"jaasuser": "jaas_password", "super": "super_secret", "\u00fcber": "p\u20acss"}
NONCE = b"eoFE1Do/7ViUMktL885kAdBAJtj5i8vaBXCqbhke"


def digest_response(challenge: bytes, user: str, password: str, *, realm: str | None = "zk-sasl-md5",
                    uri: bytes = b"zookeeper/zk-sasl-md5", authzid: bytes | None = None, nc: bytes = b"00000001",
                    qop: bytes | None = b"auth", cnonce: bytes = b"c-nonce", extra: bytes = b"",
                    hash_nonce: bytes | None = None) -> bytes:
    """A client's digest-response (RFC 2831 2.1.2) to ``challenge``, for qop auth."""
    nonce = parse_directives(challenge)["nonce"]
    value = response_value(user, realm or "", password, hash_nonce or nonce, cnonce, authzid, uri, client=True)
    parts = [b'username="' + user.encode() + b'"']
    if realm is not None:
        parts.append(b'realm="' + realm.encode() + b'"')
    parts += [b'nonce="' + nonce + b'"', b'cnonce="' + cnonce + b'"', b"nc=" + nc]
    if qop is not None:
        parts.append(b"qop=" + qop)
    parts += [b'digest-uri="' + uri + b'"', b"response=" + value]
    if authzid is not None:
        parts.append(b'authzid="' + authzid + b'"')
    return b",".join(parts) + extra


def started(users: dict[str, str] = USERS) -> tuple[DigestMD5Server, bytes]:
    server = DigestMD5Server(users)
    return server, server.evaluate(b"")


# ------------------------------------------------------------------ vectors


def test_rfc_2831_example() -> None:
    args = ("chris", "elwood.innosoft.com", "secret", b"OA6MG9tEQGm2hh", b"OA6MHXh6VqTrRk", None,
            b"imap/elwood.innosoft.com")
    assert response_value(*args, client=True) == b"d388dad90d4bbd760a152321f2143af7"
    assert response_value(*args, client=False) == b"ea40f60335c427b5527b84dbabcdfffd"


def test_an_exchange_recorded_with_zookeeper_3_8() -> None:
    server = DigestMD5Server(USERS, nonce=NONCE)
    assert server.evaluate(b"") == b'realm="zk-sasl-md5",nonce="' + NONCE + b'",charset=utf-8,algorithm=md5-sess'
    token = (b'username="jaasuser",realm="zk-sasl-md5",nonce="' + NONCE + b'",cnonce="OA6MHXh6VqTrRk",nc=00000001,'
             b'qop=auth,digest-uri="zookeeper/zk-sasl-md5",response=be1ba51ffef350f064f5404fc1da0939,'
             b'authzid="jaasuser"')
    assert server.evaluate(token) == b"rspauth=e6f13f0f59fdd4e915f4b216ae602c81"  # what ZooKeeper answered
    assert server.complete and server.user == "jaasuser"


# --------------------------------------------------------- with pure-sasl


@pytest.mark.parametrize("user", ["jaasuser", "super"])
def test_kazoos_sasl_library_authenticates_and_checks_the_servers_proof(user: str) -> None:
    client = SASLClient("zk-sasl-md5", service="zookeeper", mechanism="DIGEST-MD5", username=user,
                        password=USERS[user])
    server = DigestMD5Server(USERS)
    challenge = server.evaluate(client.process(None) or b"")  # kazoo's first token: empty
    rspauth = server.evaluate(client.process(challenge))
    assert server.complete and server.user == user
    assert client.process(rspauth) is None and client.complete  # pure-sasl raises on a wrong rspauth


def test_pure_sasl_with_a_wrong_password_fails() -> None:
    client = SASLClient("zk-sasl-md5", service="zookeeper", mechanism="DIGEST-MD5", username="jaasuser",
                        password="wrong")
    server = DigestMD5Server(USERS)
    challenge = server.evaluate(b"")
    with pytest.raises(SaslError, match="wrong password or unknown user 'jaasuser'"):
        server.evaluate(client.process(challenge))
    assert not server.complete


def test_a_non_ascii_user_hashes_as_iso_8859_1_where_it_fits() -> None:
    # RFC 2831 2.1.2.1, as Java hashes it: u-umlaut as one byte, the euro sign (not in 8859-1) as UTF-8
    server, challenge = started()
    assert server.evaluate(digest_response(challenge, "\u00fcber", "p\u20acss")).startswith(b"rspauth=")
    assert server.user == "\u00fcber"


# ------------------------------------------------------------ the outcome


def test_the_identity_is_the_authenticated_user_whatever_authzid_asks_for() -> None:
    # ZooKeeper's callback handler authorizes any authzid, then replaces it with the authentication id
    server, challenge = started()
    server.evaluate(digest_response(challenge, "jaasuser", "jaas_password", authzid=b"super"))
    assert server.complete and server.user == "jaasuser"


def test_each_exchange_has_its_own_random_nonce() -> None:
    nonces = {parse_directives(started()[1])["nonce"] for _ in range(50)}
    assert len(nonces) == 50
    assert all(len(n) == 40 for n in nonces)  # 30 random bytes in base64, as Java's


ACCEPTED = {
    "digest-uri in another case (Java compares it so)": {"uri": b"ZooKeeper/ZK-SASL-MD5"},
    "no qop (auth is the default)": {"qop": None},
    "an unknown directive": {"extra": b',foo="bar"'},
    "charset=utf-8": {"extra": b",charset=utf-8"},
    "a trailing comma": {"extra": b","},
}


@pytest.mark.parametrize("change", ACCEPTED.values(), ids=list(ACCEPTED))
def test_what_zookeeper_accepts(change: dict[str, object]) -> None:
    server, challenge = started()
    server.evaluate(digest_response(challenge, "jaasuser", "jaas_password", **change))  # type: ignore[arg-type]
    assert server.complete


REFUSED = {
    "wrong password": ({"password": "nope"}, "wrong password or unknown user"),
    "unknown user": ({"user": "nobody", "password": "jaas_password"}, "wrong password or unknown user 'nobody'"),
    "another realm": ({"realm": "other"}, "realm"),
    "no realm": ({"realm": None}, "realm"),
    "another host in digest-uri": ({"uri": b"zookeeper/localhost"}, "digest-uri"),
    "another service in digest-uri": ({"uri": b"http/zk-sasl-md5"}, "digest-uri"),
    "a serv-name in digest-uri": ({"uri": b"zookeeper/zk-sasl-md5/x"}, "digest-uri"),
    "nonce count 2": ({"nc": b"00000002"}, "nonce count"),
    "qop auth-int": ({"qop": b"auth-int"}, "qop"),
    "charset latin1": ({"extra": b",charset=latin1"}, "charset"),
    "username twice": ({"extra": b',username="super"'}, "given twice"),
    "an unclosed quote": ({"extra": b',x="open'}, "not closed"),
    "bytes after a value": ({"extra": b" junk"}, "',' expected"),
    "a response hashed over another nonce (a replay)": ({"hash_nonce": b"another-nonce"},
                                                         "wrong password or unknown user"),
}


@pytest.mark.parametrize(("change", "why"), REFUSED.values(), ids=list(REFUSED))
def test_what_is_refused(change: dict[str, object], why: str) -> None:
    server, challenge = started()
    kw: dict[str, object] = {"user": "jaasuser", "password": "jaas_password", **change}
    user, password = str(kw.pop("user")), str(kw.pop("password"))
    token = digest_response(challenge, user, password, **kw)  # type: ignore[arg-type]
    with pytest.raises(SaslError, match=why) as err:
        server.evaluate(token)
    assert "jaas_password" not in str(err.value) and "response=" not in str(err.value)
    assert not server.complete
    with pytest.raises(SaslError, match="after the exchange failed"):  # one try per challenge
        server.evaluate(digest_response(challenge, "jaasuser", "jaas_password"))


def test_missing_directives_and_bad_bytes() -> None:
    for token in (b"", b"x", b"=", b'username="jaasuser"', b"\xff\xfe=1", b'username="\xff",realm="zk-sasl-md5"'):
        server, _ = started()
        with pytest.raises(SaslError):
            server.evaluate(token)
    server, challenge = started()
    bad_utf8 = digest_response(challenge, "jaasuser", "jaas_password").replace(b'"jaasuser"', b'"\xffjaas"')
    with pytest.raises(SaslError, match="not UTF-8"):
        server.evaluate(bad_utf8)


def test_a_response_of_another_exchange_is_refused() -> None:
    first, challenge = started()
    replay = digest_response(challenge, "jaasuser", "jaas_password")
    first.evaluate(replay)
    second, _ = started()
    with pytest.raises(SaslError, match="not the nonce"):
        second.evaluate(replay)


def test_token_sizes() -> None:
    # Java's limit, 4096 bytes, on the first token (whose content it ignores) and on the response
    server = DigestMD5Server(USERS)
    assert server.evaluate(b"a" * MAX_TOKEN).startswith(b'realm="zk-sasl-md5"')
    with pytest.raises(SaslError, match="4097 bytes"):
        DigestMD5Server(USERS).evaluate(b"a" * (MAX_TOKEN + 1))
    server, challenge = started()
    padded = digest_response(challenge, "jaasuser", "jaas_password", extra=b",x=" + b"a" * 3600)
    assert len(padded) <= MAX_TOKEN
    server.evaluate(padded)
    assert server.complete
    server, challenge = started()
    with pytest.raises(SaslError, match="bytes; at most 4096"):
        server.evaluate(digest_response(challenge, "jaasuser", "jaas_password", extra=b",x=" + b"a" * 4000))


def test_nothing_after_the_exchange_completed() -> None:
    server, challenge = started()
    server.evaluate(digest_response(challenge, "jaasuser", "jaas_password"))
    with pytest.raises(SaslError, match="after the exchange completed"):
        server.evaluate(b"")
    assert server.user == "jaasuser"  # what it proved stays


# ------------------------------------------------------------------ JAAS




def test_kazoos_harness_file() -> None:
    assert users_of("jaas.conf", HARNESS_JAAS) == {"super": "super_secret", "jaasuser": "jaas_password"}


def test_comments_other_sections_bare_words_and_escapes() -> None:
    text = """
    // a client section beside it, as one file serves both
    Client { org.apache.zookeeper.server.auth.DigestLoginModule required username="bob" password="x"; };
    /* the server: two modules */
    Server {
        # ZooKeeper takes user_ options of every module
        org.apache.zookeeper.server.auth.DigestLoginModule required user_bob=bare-word.1 debug=true;
        other.Module optional
            user_quote="a \\"b\\" c\\\\" user_bob="later wins";
    };
    """
    assert users_of("f", text) == {"bob": "later wins", "quote": 'a "b" c\\'}
    assert set(parse("f", text)) == {"Client", "Server"}


BAD_FILES = {
    "no Server section": ("Client { m required user_a=\"b\"; };", "f: no 'Server' section"),
    "no users": ("Server { com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true; };",
                 "no user_<name>"),
    "missing ';'": ('Server {\n m required user_a="b"\n};', "f: line 3: expected an option name or ';', got '}'"),
    "missing '};'": ('Server {\n m required user_a="b";\n',
                     "f: line 2: expected a login module class name or '}', got the end of the file"),
    "a bad flag": ('Server {\n m mandatory user_a="b";\n};', "f: line 2: expected a flag"),
    "an unclosed quote": ('Server {\n m required user_a="b;\n};', "f: line 2: a quoted value is not closed"),
    "an unclosed comment": ("/* Server {", "f: line 1: a /* comment is not closed"),
    "a stray character": ('Server {\n m required user_a@b="c";\n};', "f: line 2: unexpected character '@'"),
    "no value": ('Server {\n m required user_a=;\n};', "f: line 2: expected a value for option 'user_a', got ';'"),
}


@pytest.mark.parametrize(("text", "message"), BAD_FILES.values(), ids=list(BAD_FILES))
def test_a_file_that_does_not_parse_is_one_line(text: str, message: str) -> None:
    with pytest.raises(JaasError) as err:
        users_of("f", text)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_load_users_errors_name_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "none.conf"
    with pytest.raises(JaasError, match=f"{missing}: cannot read"):
        load_users(str(missing))
    latin = tmp_path / "latin.conf"
    latin.write_bytes(b'Server { m required user_a="\xe9"; };')
    with pytest.raises(JaasError, match="not UTF-8"):
        load_users(str(latin))
    ok = tmp_path / "jaas.conf"
    ok.write_text(HARNESS_JAAS)
    assert load_users(str(ok))["jaasuser"] == "jaas_password"


# ------------------------------------------------------------- the sasl ACL scheme


def test_sasl_acl_entries_grant_to_the_sasl_id_and_the_sasl_user_super() -> None:
    acl = (ACL(READ, Id("sasl", "jaasuser")),)
    assert allowed(acl, READ, [Id("sasl", "jaasuser")])
    assert not allowed(acl, READ, [Id("sasl", "other"), Id("digest", "jaasuser:x")])
    assert allowed(acl, READ, [Id("sasl", "super")])  # SASLAuthenticationProvider.matches
    digest_only = (ACL(ALL, Id("digest", "u:hash")),)
    assert not allowed(digest_only, READ, [Id("sasl", "super")])  # a sasl match only, not a superuser
    assert allowed(digest_only, READ, [Id("sasl", "admin"), SUPER])  # zk_sasl_super_user's


def test_sasl_acl_validity_and_the_auth_scheme() -> None:
    # SASLAuthenticationProvider.isValid: what Kerberos' name parser takes
    for name in ("bob", "a/b/c", "svc/host@REALM", "user@REALM", ""):
        assert fixup("/n", [], [ACL(ALL, Id("sasl", name))]) == (ACL(ALL, Id("sasl", name)),)
    for name in ("a@b@c", "a/b/c@R", "a@R/x"):
        with pytest.raises(ZKError):
            fixup("/n", [], [ACL(ALL, Id("sasl", name))])
    # "auth" expands to the SASL id as to digest ones (isAuthenticated), not to ip
    mine = [Id("ip", "127.0.0.1"), Id("sasl", "jaasuser")]
    assert fixup("/n", mine, [ACL(ALL, Id("auth", ""))]) == (ACL(ALL, Id("sasl", "jaasuser")),)
