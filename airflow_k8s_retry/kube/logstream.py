"""Reading a container's log in pieces, with no line repeated or lost between the pieces.

``logging_interval`` streams the base container's new lines into the trigger's log while the pod
runs, and the worker then writes the rest. The API has no cursor for ``pods/log``: it takes a
relative ``sinceSeconds`` (``sinceTime`` is not in the client's API) with one-second resolution,
on the server's clock. So every read asks for a generous window with ``timestamps=true``, and the
kubelet's own timestamp of each line decides what is new: a :class:`LogPosition` is the timestamp
of the last line read and how many lines carried exactly that timestamp (a burst of writes can
share one). Lines at or before the position are dropped, whatever the window returned.

Assumes the kubelet's timestamps do not go backwards within one container's log, which holds for
one stream; stdout and stderr written within the same instant may interleave either way.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_k8s_retry.kube.aio import AsyncKube
    from airflow_k8s_retry.kube.pods import PodClient

#: Extra seconds each read reaches back beyond the position: covers the one-second resolution
#: and a clock skew between this process and the node.
WINDOW_MARGIN = 60
_STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)$")


@dataclass(frozen=True)
class LogPosition:
    """Where a log read stopped: the last line's timestamp, and the lines read with exactly it."""

    time: str
    count: int = 1

    def __post_init__(self) -> None:
        if stamp_key(self.time) is None:
            raise ValueError(f"LogPosition.time must be an RFC 3339 timestamp, got {self.time!r}")
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 1:
            raise ValueError(f"LogPosition.count must be a whole number >= 1, got {self.count!r}")

    @property
    def epoch(self) -> float:
        key = stamp_key(self.time)
        assert key is not None
        return key[0] + key[1] / 1e9

    def to_payload(self) -> dict[str, Any]:
        return {"time": self.time, "count": self.count}

    @classmethod
    def from_payload(cls, data: Mapping[str, Any] | None) -> LogPosition | None:
        if not data:
            return None
        return cls(time=str(data["time"]), count=int(data.get("count", 1)))


def stamp_key(text: str) -> tuple[int, int] | None:
    """``(epoch seconds, nanoseconds)`` of a kubelet timestamp, or None when ``text`` is not one."""
    match = _STAMP.match(text)
    if match is None:
        return None
    base, fraction, zone = match.groups()
    try:
        at = datetime.fromisoformat(base + ("+00:00" if zone == "Z" else zone))
    except ValueError:
        return None
    return int(at.timestamp()), int((fraction or "").ljust(9, "0"))


def new_lines(raw: str, position: LogPosition | None) -> tuple[list[str], LogPosition | None]:
    """The lines of a timestamped log read that come after ``position``, and the new position.

    Empty writes move the position but are not returned; a line without a timestamp continues the
    line before it.
    """
    after = stamp_key(position.time) if position is not None else None
    seen_at_after = position.count if position is not None else 0
    out: list[str] = []
    last: tuple[str, tuple[int, int]] | None = None
    count, fresh = 0, False
    for line in raw.split("\n"):
        stamp, _, message = line.partition(" ")
        key = stamp_key(stamp)
        if key is None:
            if fresh and line:
                out.append(line)
            continue
        if after is not None and key < after:
            fresh = False
            continue
        count = count + 1 if last is not None and last[1] == key else 1
        last = (stamp, key)
        fresh = after is None or key > after or count > seen_at_after
        if fresh and message.strip():
            out.append(message.rstrip("\r"))
    if last is None:
        return out, position
    return out, LogPosition(last[0], count)


def since_seconds(position: LogPosition | None, now: float) -> int | None:
    """The ``sinceSeconds`` that reaches back to ``position`` (None: read from the start)."""
    if position is None:
        return None
    return max(1, math.ceil(now - position.epoch) + WINDOW_MARGIN)


async def read_new(
    kube: AsyncKube,
    namespace: str,
    name: str,
    container: str,
    position: LogPosition | None,
    *,
    now: float,
) -> tuple[list[str], LogPosition | None]:
    """One read of ``container``'s log: the lines after ``position`` and the new position.

    ``now`` is this process's wall-clock time (``sinceSeconds`` is counted on the server's clock,
    and the margin covers a skew between the two).
    """
    raw = await kube.read_log(
        namespace, name, container=container, timestamps=True, since_seconds=since_seconds(position, now)
    )
    return new_lines(raw, position)


def read_new_sync(
    client: PodClient,
    namespace: str,
    name: str,
    container: str,
    position: LogPosition | None,
    *,
    now: float,
) -> tuple[list[str], LogPosition | None]:
    """The same read through the synchronous :class:`~airflow_k8s_retry.kube.pods.PodClient` (the
    worker's)."""
    raw = client.log(namespace, name, container, timestamps=True, since_seconds=since_seconds(position, now))
    return new_lines(raw, position)
