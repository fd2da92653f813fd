"""The parity tier's end-to-end half shares the end-to-end tier's migrated Airflow database."""

from __future__ import annotations

from tests.end_to_end.conftest import migrated_database

__all__ = ["migrated_database"]
