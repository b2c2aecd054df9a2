"""The shared Packer behind every frame gives msgpack.packb's bytes."""

from __future__ import annotations

import msgpack
from hypothesis import given, settings
from hypothesis import strategies as st

from zabd.codec.framing import frame, pack

values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats(allow_nan=False)
    | st.text(max_size=40) | st.binary(max_size=300),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=8), inner, max_size=6),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(values)
def test_pack_is_packb(value: object) -> None:
    assert pack(value) == msgpack.packb(value)


def test_a_frame_past_the_kept_buffer_and_the_one_after_it() -> None:
    # a frame past the initial buffer replaces the shared packer (no big
    # buffer kept); the frames before and after it are packb's bytes too
    small = (6, 2**40 + 7, b"x" * 1100)
    big = (7, b"y" * (1 << 20))
    for value in (small, big, small, big, small):
        body = msgpack.packb(value)
        assert frame(value) == len(body).to_bytes(4, "big") + body
