"""The one bounded, expiring store (``http.ttl_store``) behind image URLs and stored
responses; the two uses are tested with their endpoints' own rules in
test_image_store.py and test_responses_api.py."""

from __future__ import annotations

from mlx_gateway.supervisor.http.ttl_store import TtlStore


def test_keeping_a_key_again_replaces_it_and_restarts_its_ttl() -> None:
    now = [0.0]
    store: TtlStore[str] = TtlStore(max_bytes=100, ttl=10, clock=lambda: now[0])
    assert store.keep("a", "first", 40)
    now[0] = 8
    assert store.keep("a", "second", 30)
    assert (store.get("a"), store.bytes, len(store)) == ("second", 30, 1)
    now[0] = 12  # 12 s after the first keep, 4 s after the second
    assert store.get("a") == "second" and store.expires_in("a") == 6
    now[0] = 18
    assert store.get("a") is None and store.bytes == 0 and store.expires_in("a") == 0


def test_an_oversized_entry_is_refused_without_dropping_the_others() -> None:
    store: TtlStore[int] = TtlStore(max_bytes=10, ttl=60)
    assert store.keep("small", 1, 6)
    assert not store.keep("huge", 2, 11)
    assert store.get("huge") is None and store.get("small") == 1 and store.bytes == 6


def test_keep_oversized_keeps_it_alone() -> None:
    store: TtlStore[int] = TtlStore(max_bytes=10, ttl=60, keep_oversized=True)
    store.keep("a", 1, 4)
    store.keep("b", 2, 4)
    assert store.keep("huge", 3, 11)
    assert (len(store), store.get("huge"), store.bytes) == (1, 3, 11)
    assert store.delete("huge") and not store.delete("huge") and store.bytes == 0
