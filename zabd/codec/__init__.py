"""What crosses a socket: framing, the peer frames, the client schema.

Both ``zabd.client`` and ``zabd.server`` depend on this package; it depends on
nothing above ``zabd.protocol``.
"""
