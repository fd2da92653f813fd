"""The soak's monkey brings every kind of API fault the proxy can inject, each with its window."""

from __future__ import annotations

import collections

from tests.soak.plan import API_WINDOWS, draw
from tests.support.api_faults import KINDS


def test_the_plans_windows_are_the_proxys_kinds() -> None:
    assert sorted(API_WINDOWS) == sorted(KINDS)
    assert all(seconds > 0 and 0 < share <= 1 for seconds, share in API_WINDOWS.values())


def test_seven_api_actions_bring_every_kind_once() -> None:
    plan = draw(1, 300)
    drawn = [action.removeprefix("api_") for _, action in plan.monkey if action.startswith("api_")]
    assert len(drawn) >= len(KINDS)
    assert sorted(drawn[: len(KINDS)]) == sorted(KINDS)
    counts = collections.Counter(drawn)
    assert max(counts.values()) - min(counts[k] for k in KINDS) <= 1


def test_a_seed_replays_its_api_faults() -> None:
    assert draw(5, 40).monkey == draw(5, 40).monkey
    assert draw(5, 40).monkey != draw(6, 40).monkey
