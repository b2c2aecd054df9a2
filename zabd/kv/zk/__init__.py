"""ZooKeeper's data model as a replicated state machine of zabd.

The pieces, each pure (no sockets, clock or disk):

| module | job |
| --- | --- |
| ``errors`` | ZooKeeper's error codes (``KeeperException.Code``) |
| ``events`` | watch event types and keeper states, as ZooKeeper numbers them |
| ``paths`` | path validation (``PathUtils.validatePath``) |
| ``acl`` | ids, permissions, ``digest`` ids, ACL fix-up and checks |
| ``records`` | requests, results and ``Stat`` |
| ``tree`` | the data tree and the session table: applies committed txns |
| ``prep`` | the leader's request processor: a request becomes a txn |
| ``sessions`` | session ids and the leader's expiry tracker |
| ``watches`` | one server's watches: who hears of which applied change |

Txn payloads are encoded by ``zabd.codec.zk_txn``.
"""
