"""The server's ZooKeeper port: connections, sessions and their expiry, reconfig,
four-letter words and metrics. What ZooKeeper *is* (records, codec, tree) lives
in ``zabd.zk``; this package is how one replica serves it over TCP.

| module | job |
| --- | --- |
| ``port`` | the listener, its limits, and one connection's frames in and out |
| ``conn`` | one connection's socket-free state: its session, xids, throttling |
| ``sessions`` | requests to the state machine and answers back; connect, re-attach, close |
| ``expiry`` | the leader's session expiry, and wiring the ZooKeeper layer into a replica |
| ``reconfig`` | ``reconfig`` requests as membership changes of the core |
| ``stats``, ``words``, ``metrics`` | ``stat``/``srvr``/``cons``, the four-letter words, ``mntr`` and Prometheus |
"""
