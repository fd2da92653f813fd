"""The operator's in-process fixtures: a task instance stand-in, its context, a simulator per test,
and API back-off that records instead of sleeping."""

from __future__ import annotations

from tests.support.task_fixtures import context, make_cluster, no_backoff_sleep, ti

__all__ = ["context", "make_cluster", "no_backoff_sleep", "ti"]
