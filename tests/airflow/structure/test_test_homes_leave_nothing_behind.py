"""The suite's throw-away Airflow homes: made only where none is set, removed by the process that made
them (a run of the suite left one folder per process, and one per fixture module, in the temp dir)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]

# Each module that sets a throw-away home as it is imported, with whether it replaces one already set
# (the conftest does: a test session never uses the home of the process that started it, which it
# would then remove; a fixture module keeps the conftest's).
MODULES = {
    "tests.conftest": True,
    "tests.support.watch_fixtures": False,
    "tests.support.task_fixtures": False,
}


def _import_in_a_fresh_interpreter(module: str, tmp_path: Path, *, home: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "AIRFLOW_HOME"}
    env.update(TMPDIR=str(tmp_path), PYTHONPATH=os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]))
    if home is not None:
        env["AIRFLOW_HOME"] = home
    code = f"import importlib, os; importlib.import_module({module!r}); print(os.environ['AIRFLOW_HOME'])"
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip().splitlines()[-1]


def test_a_home_made_for_a_process_is_gone_when_it_exits(tmp_path: Path) -> None:
    used = _import_in_a_fresh_interpreter("tests.conftest", tmp_path, home=None)
    assert Path(used).parent == tmp_path
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("module", sorted(MODULES))
def test_a_home_already_set_is_kept_unless_replaced_and_no_other_is_made(module: str, tmp_path: Path) -> None:
    parents = tmp_path / "parents-home"
    parents.mkdir()
    used = _import_in_a_fresh_interpreter(module, tmp_path, home=str(parents))
    assert (used != str(parents)) is MODULES[module]
    assert [p.name for p in tmp_path.iterdir()] == ["parents-home"]
