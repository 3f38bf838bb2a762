"""The eviction decision on plain records: no asyncio, no workers."""

from __future__ import annotations

from mlx_gateway.supervisor.pool.eviction import Newcomer, Resident, decide, never_fits

GB = 1000**3


def test_nothing_goes_when_the_newcomer_fits() -> None:
    decision = decide([Resident("a", 4 * GB, idle=True)], Newcomer("b", 4 * GB), 10 * GB)
    assert decision.evict == [] and decision.fits and decision.free_after == 6 * GB


def test_least_recently_used_idle_models_go_first_and_only_as_many_as_needed() -> None:
    residents = [
        Resident("recent", 3 * GB, idle=True, last_used=30.0),
        Resident("oldest", 3 * GB, idle=True, last_used=10.0),
        Resident("older", 3 * GB, idle=True, last_used=20.0),
    ]
    decision = decide(residents, Newcomer("new", 5 * GB), 10 * GB)
    assert decision.evict == ["oldest", "older"] and decision.fits


def test_busy_and_pinned_models_block_and_nothing_is_evicted_in_vain() -> None:
    residents = [
        Resident("busy", 4 * GB, idle=False),
        Resident("pinned", 4 * GB, idle=True, pinned=True),
        Resident("idle", 1 * GB, idle=True),
    ]
    decision = decide(residents, Newcomer("new", 4 * GB), 10 * GB)
    assert decision.blockers == ["busy", "pinned"] and not decision.fits
    assert decision.evict == ["idle"]  # what would go once the blockers are gone


def test_group_members_go_even_when_there_is_room() -> None:
    residents = [
        Resident("twin", 1 * GB, idle=True, group="big"),
        Resident("other", 1 * GB, idle=True, group="small"),
    ]
    decision = decide(residents, Newcomer("new", 1 * GB, group="big"), 100 * GB)
    assert decision.evict == ["twin"] and decision.fits
    busy_twin = [Resident("twin", 1 * GB, idle=False, group="big")]
    assert decide(busy_twin, Newcomer("new", 1 * GB, group="big"), 100 * GB).blockers == ["twin"]


def test_the_newcomer_itself_is_not_counted() -> None:
    residents = [Resident("new", 8 * GB, idle=True)]
    assert decide(residents, Newcomer("new", 8 * GB), 10 * GB).fits


def test_never_fits_is_more_than_the_whole_budget() -> None:
    assert never_fits(Newcomer("x", 11 * GB), 10 * GB)
    assert not never_fits(Newcomer("x", 10 * GB), 10 * GB)
