"""Which of two states of an object is newer, and in which order Events happened.

Every reader of the API (the watch hub, the trigger, the synchronous client) compares
resourceVersions and sorts Events; they must agree, or a state one of them drops as stale another
delivers. resourceVersions are opaque strings by contract, but every real API server hands out etcd
revisions (integers), so two that look like integers are compared as such; otherwise only equality
counts as "not newer".

Example::

    >>> rv_newer("12", "9"), rv_newer("9", "9"), rv_newer("abc", "9"), rv_newer(None, "9")
    (True, False, True, True)
    >>> rv_older("9", "12"), rv_older("9", "9"), rv_older("abc", "9")
    (True, False, False)
    >>> event_sort_key({"lastTimestamp": "2024-01-01T00:00:00Z", "metadata": {"resourceVersion": "7"}})
    ('2024-01-01T00:00:00Z', '7')
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def metadata(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """``obj["metadata"]``, or an empty mapping when it is missing or not a mapping."""
    meta = (obj or {}).get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def resource_version(obj: Mapping[str, Any] | None) -> str | None:
    """The object's resourceVersion, or None when it has none."""
    rv = metadata(obj).get("resourceVersion")
    return str(rv) if rv else None


def rv_newer(new: str | None, old: str | None) -> bool:
    """True unless ``new`` is provably the same as or older than ``old``."""
    if not new or not old:
        return True
    if new == old:
        return False
    if new.isdigit() and old.isdigit():
        return int(new) > int(old)
    return True


def rv_older(new: str | None, old: str | None) -> bool:
    """True only when ``new`` is provably older than ``old`` (both integers, ``new`` the smaller)."""
    return bool(new and old and new.isdigit() and old.isdigit() and int(new) < int(old))


def is_newer(candidate: Mapping[str, Any] | None, current: Mapping[str, Any] | None) -> bool:
    """:func:`rv_newer` on two objects' resourceVersions."""
    return rv_newer(resource_version(candidate), resource_version(current))


def is_older(candidate: Mapping[str, Any] | None, current: Mapping[str, Any] | None) -> bool:
    """:func:`rv_older` on two objects' resourceVersions."""
    return rv_older(resource_version(candidate), resource_version(current))


def event_time(event: Mapping[str, Any]) -> str:
    """When an Event last happened: lastTimestamp, else eventTime, firstTimestamp, creationTimestamp."""
    return str(
        event.get("lastTimestamp")
        or event.get("eventTime")
        or event.get("firstTimestamp")
        or metadata(event).get("creationTimestamp")
        or ""
    )


def event_sort_key(event: Mapping[str, Any]) -> tuple[str, str]:
    """Sort key for Events, oldest first: their time, then their resourceVersion."""
    return event_time(event), str(metadata(event).get("resourceVersion") or "")
