"""The cache of migrated metadata databases the Airflow tiers copy from: one entry per environment
(not per clone), and entries nobody used for a month removed."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tools import airflow_runner


@pytest.fixture
def migrations(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[dict[str, str]]:
    """``airflow db migrate`` replaced at the test's boundary: it writes the database file and
    records the environment each call ran with."""
    calls: list[dict[str, str]] = []

    def migrate(args: list[str], env: dict[str, str], **_: Any) -> subprocess.CompletedProcess[str]:
        assert args[1:] == ["db", "migrate"]
        calls.append(env)
        Path(env["AIRFLOW_HOME"], "airflow.db").write_bytes(b"migrated")
        return subprocess.CompletedProcess(args, 0, "", "")

    monkeypatch.setattr(subprocess, "run", migrate)
    monkeypatch.setenv("AIRFLOW_K8S_RETRY_CACHE", str(tmp_path / "cache"))
    return calls


def test_two_clones_with_the_same_pins_share_one_migrated_database(
    migrations: list[dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "prefix", "/tmp/clone-a/.venv")
    first = airflow_runner.migrated_database_cache()
    monkeypatch.setattr(sys, "prefix", "/tmp/clone-b/.venv")
    second = airflow_runner.migrated_database_cache()

    assert second == first
    assert first.read_bytes() == b"migrated"
    assert len(migrations) == 1


def test_an_entry_unused_for_a_month_is_removed_unless_in_use(
    migrations: list[dict[str, str]], tmp_path: Path
) -> None:
    parent = tmp_path / "cache" / "migrated-db"
    month_ago = time.time() - (airflow_runner.MIGRATED_DB_KEEP_DAYS + 1) * 86400
    entries = {}
    for name, used_at in [("old", month_ago), ("held", month_ago), ("recent", time.time() - 86400)]:
        entry = parent / f"3.3.2-{name}"
        entry.mkdir(parents=True)
        (entry / "airflow.db").write_bytes(b"migrated")
        (entry / ".lock").touch()
        os.utime(entry / ".lock", (used_at, used_at))
        entries[name] = entry

    (parent / "notes.txt").write_text("not an entry")
    with (entries["held"] / ".lock").open("a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # another process copying from it
        current = airflow_runner.migrated_database_cache().parent

    kept = sorted(p.name for p in parent.iterdir())
    assert kept == sorted([current.name, "3.3.2-held", "3.3.2-recent", "notes.txt"])
    assert (current / ".lock").stat().st_mtime > time.time() - 60


def test_an_entry_another_process_removed_first_is_passed_over(tmp_path: Path) -> None:
    entry = tmp_path / "3.3.2-gone"
    entry.mkdir()
    (entry / ".lock").touch()
    os.utime(entry / ".lock", (0, 0))
    real_open = Path.open

    def removed_meanwhile(self: Path, *args: Any, **kwargs: Any) -> Any:
        if self == entry / ".lock":  # the other process's prune ran between the stat and the open
            (entry / ".lock").unlink()
            entry.rmdir()
        return real_open(self, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Path, "open", removed_meanwhile)
        assert airflow_runner.prune_migrated_databases(tmp_path, keep=tmp_path / "other") == []
