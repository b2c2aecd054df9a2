"""Byte formats the server and its clients share: framing (``u32 length +
msgpack``), the client schema, the members' addresses a membership change
carries. The peer frames are the server's (``zabd.server.peer_wire``) and
ZooKeeper's formats are ``zabd.zk``'s.

Both ``zabd.client`` and ``zabd.server`` depend on this package; it depends on
nothing above ``zabd.protocol``.
"""
