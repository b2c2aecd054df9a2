"""ZooKeeper, as zabd speaks and keeps it: the one package that owns its vocabulary.

Every module is pure (no sockets, clock or disk); the server's ZooKeeper port
(``zabd.server.zk``) and the state machine (``zabd.kv.kvmachine``) are built on it.

| module | job |
| --- | --- |
| ``errors`` | ZooKeeper's error codes (``KeeperException.Code``) |
| ``events`` | watch event types and keeper states, as ZooKeeper numbers them |
| ``paths`` | path validation (``PathUtils.validatePath``) |
| ``acl`` | ids, permissions, ``digest`` ids, ACL fix-up and checks |
| ``records`` | requests, results and ``Stat`` |
| ``jute`` | the client wire: jute records as ZooKeeper's clients send and read them |
| ``msgpack_wire`` | a request as zabd's own ports carry it (a follower's forwarded write, the KV port) |
| ``txn`` | the txn payloads in the log: what a committed ZooKeeper write is |
| ``txn_check`` | the checks every replica makes of a txn before applying it |
| ``prep`` | the leader's request processor: a request becomes a txn |
| ``tree`` | the data tree and the session table: applies committed txns |
| ``reads`` | reads served from one replica's tree |
| ``sessions`` | session ids, passwords and the leader's expiry tracker |
| ``watches`` | one server's watches: who hears of which applied change |
| ``sasl``, ``jaas`` | SASL DIGEST-MD5 and the JAAS file its users come from |
"""
