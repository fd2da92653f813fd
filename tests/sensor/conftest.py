"""The sensor's tests share the operator's in-process fixtures (a throw-away Airflow home, a task
instance stand-in, a simulator per test), the watching tests' manual clock, and the end-to-end tests'
migrated Airflow database."""

from __future__ import annotations

from tests.end_to_end.conftest import migrated_database
from tests.operator.conftest import context, make_cluster, ti
from tests.watching.conftest import manual_clock

__all__ = ["context", "make_cluster", "manual_clock", "migrated_database", "ti"]
