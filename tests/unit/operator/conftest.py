"""The operator's in-process fixtures: a task instance stand-in, its context, and API back-off that
records instead of sleeping."""

from __future__ import annotations

from tests.support.task_fixtures import context, retry_sleep, ti

__all__ = ["context", "retry_sleep", "ti"]
