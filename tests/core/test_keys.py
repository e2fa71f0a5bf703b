"""Client-supplied keys compared whole (``app.core.keys.whole_key``), with hand-computed values."""

from __future__ import annotations

import hashlib

from app.core.keys import whole_key


def test_short_strings_are_kept_and_integers_keep_their_type() -> None:
    assert whole_key("conv-1", 256) == "conv-1"
    assert whole_key("", 256) == ""
    assert whole_key(77, 256) == "77#int" != whole_key("77", 256) == "77"
    assert whole_key(-3, 100) == "-3#int"


def test_long_values_keep_their_start_and_a_hash_of_the_whole() -> None:
    alice, bob = "s" * 256 + "-alice", "s" * 256 + "-bob"
    digest = hashlib.sha256(f"str:{alice}".encode()).hexdigest()[:32]
    assert whole_key(alice, 256) == "s" * 216 + "#sha256:" + digest
    assert whole_key(bob, 256) != whole_key(alice, 256)
    assert len(whole_key(alice, 256)) == 256 and len(whole_key("x" * 101, 100)) == 100
    assert whole_key("x" * 100, 100) == "x" * 100  # at the limit: as it is
    big = 10**300
    assert whole_key(big, 100).endswith("#sha256:" + hashlib.sha256(f"int:{big}".encode()).hexdigest()[:32])


def test_a_string_shaped_like_a_made_key_is_hashed_too() -> None:
    assert whole_key("77#int", 256) not in ("77#int", "77")
    made = whole_key("y" * 300, 256)
    assert whole_key(made, 256) != made  # no string can pose as another value's key
