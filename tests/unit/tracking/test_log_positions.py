"""A log read in pieces: each line once, whatever window the API returned around the position."""

from __future__ import annotations

import pytest

from airflow_k8s_retry.triggers.pod import LogPosition, new_lines, since_seconds, stamp_key

LOG = (
    "2026-12-01T12:00:00.100000000Z one\n"
    "2026-12-01T12:00:00.100000000Z two\n"  # a burst: the same timestamp twice
    "2026-12-01T12:00:01.5Z three\n"  # RFC 3339 with its trailing zeros trimmed, as the kubelet writes
    "2026-12-01T12:00:01.5Z \n"  # an empty write moves the position, prints nothing
    "2026-12-01T12:00:02+00:00 four\n"
)


def test_every_split_of_a_log_gives_each_line_once() -> None:
    rows = LOG.splitlines(keepends=True)
    for cut in range(len(rows) + 1):
        head, position = new_lines("".join(rows[:cut]), None)
        # The second read reaches back over everything (a wide sinceSeconds window).
        tail, end = new_lines(LOG, position)
        assert head + tail == ["one", "two", "three", "four"], cut
        assert end == LogPosition("2026-12-01T12:00:02+00:00", 1)


def test_a_burst_split_in_the_middle_is_not_repeated() -> None:
    first, position = new_lines("2026-12-01T12:00:00.100000000Z one\n", None)
    assert (first, position) == (["one"], LogPosition("2026-12-01T12:00:00.100000000Z", 1))
    rest, _ = new_lines(LOG, position)
    assert rest == ["two", "three", "four"]


def test_nothing_new_keeps_the_position() -> None:
    position = LogPosition("2026-12-01T12:00:02+00:00", 1)
    assert new_lines(LOG, position) == ([], position)
    assert new_lines("", position) == ([], position)


def test_timestamps_compare_as_instants_not_as_text() -> None:
    assert stamp_key("2026-12-01T12:00:01.5Z") == stamp_key("2026-12-01T12:00:01.500000000Z")
    assert stamp_key("2026-12-01T13:00:01.5+01:00") == stamp_key("2026-12-01T12:00:01.5Z")
    assert stamp_key("not a time") is None


def test_the_window_reaches_back_past_the_position() -> None:
    position = LogPosition("2026-12-01T12:00:00.5Z")
    assert since_seconds(None, 0.0) is None
    assert since_seconds(position, position.epoch + 10.2) == 11 + 60


def test_a_position_round_trips_and_rejects_garbage() -> None:
    position = LogPosition("2026-12-01T12:00:00.5Z", 3)
    assert LogPosition.from_payload(position.to_payload()) == position
    assert LogPosition.from_payload(None) is None
    with pytest.raises(ValueError, match="RFC 3339"):
        LogPosition("yesterday")
    with pytest.raises(ValueError, match="count"):
        LogPosition("2026-12-01T12:00:00Z", 0)
