"""Run DAGs under real Airflow (``airflow dags test``) in a throw-away ``AIRFLOW_HOME``.

End-to-end tests, the demo and the benchmarks all need the same thing: a fresh metadata database,
a dags folder, a ``kubernetes_default`` connection pointing at a kubeconfig (usually the
simulator's), an ``airflow dags test`` subprocess per DAG run (or one interpreter running
``airflow dags test`` for several DAGs in turn: :meth:`AirflowHome.run_dags`), and afterwards the
tries and states from the metadata database. ``airflow db migrate`` costs seconds, so it runs once
per Airflow version into a cache, and every home starts from a copy of the migrated database file.

Example::

    template = MigratedDatabase.create(tmp / "template")
    home = AirflowHome.create(tmp / "home", dags_folder=dags, database=template)
    result = home.run_dag("01_basic", kubeconfig=cluster.kubeconfig)
    assert result.tries("hello") == [TryRecord("hello", 1, "success")]
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tools import dags_test_batch

AIRFLOW = str(Path(sys.executable).with_name("airflow"))
#: Runs ``airflow dags test`` for several DAGs in one interpreter (:meth:`AirflowHome.run_dags`).
BATCH = Path(dags_test_batch.__file__)
#: The lines it prints around each DAG's run (``dags_test_batch.START`` and ``END``).
BATCH_MARKER = re.compile(
    rf"^({re.escape(dags_test_batch.START)}|{re.escape(dags_test_batch.END)}) (\S+)"
    r"(?: status=(-?\d+) seconds=([\d.]+) run_id=(\S+))?$"
)
#: The lines ``airflow dags test`` logs as it starts and ends running a task instance.
DAG_TEST_MARKER = re.compile(r"\[DAG TEST\] (starting|end task) task_id=(\S+)")


def base_env(home: Path, dags_folder: Path) -> dict[str, str]:
    """Environment for an Airflow subprocess confined to ``home``; nothing from the user's home."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            # A DAG file imports this package, the cncf provider and the Kubernetes client: on a
            # loaded machine, with several Airflow processes starting at once, that took over the
            # default 30 s, and `dags test` found no DAG.
            "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "300",
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


@dataclass(frozen=True)
class MigratedDatabase:
    """A migrated, empty metadata database to copy into each home."""

    path: Path

    @classmethod
    def create(cls, directory: Path, *, timeout: float = 300) -> MigratedDatabase:
        """A migrated database in ``directory``: a copy of this Airflow's cached one (see
        :func:`migrated_database_cache`), migrated there first if it is not cached yet."""
        directory.mkdir(parents=True, exist_ok=True)
        db = directory / "airflow.db"
        if not db.exists():
            cached = migrated_database_cache(timeout)
            shutil.copyfile(cached, db)
        return cls(db)


#: A cached migrated database nobody copied for this long is removed (a pin change leaves the old
#: environment's behind).
MIGRATED_DB_KEEP_DAYS = 30


def environment_key() -> str:
    """What a migrated database depends on: the interpreter, SQLite, and every installed
    distribution's name and version (Airflow and the providers own the migrations). Not the venv's
    path: every fresh clone has its own venv, and a key by path migrated again (and kept another
    copy) for each clone of the same pins."""
    import hashlib
    import importlib.metadata

    dists = importlib.metadata.distributions()
    installed = sorted({f"{(dist.metadata['Name'] or '').lower()}=={dist.version}" for dist in dists})
    text = "\n".join([sys.version, sqlite3.sqlite_version, *installed])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def migrated_database_cache(timeout: float = 300) -> Path:
    """This Airflow's freshly migrated, empty SQLite metadata database, made once per environment
    (:func:`environment_key`; ``airflow db migrate`` costs seconds of CPU each time) and kept in the
    project's cache folder (``AIRFLOW_K8S_RETRY_CACHE``, else ``~/.cache/airflow-k8s-retry``, as
    for the control plane's build) for later runs, other clones and other test processes; one
    process migrates while the others wait on a lock. Entries no process used for
    :data:`MIGRATED_DB_KEEP_DAYS` are removed."""
    import fcntl
    from importlib.metadata import version

    airflow_version = version("apache-airflow")
    root = Path(os.environ.get("AIRFLOW_K8S_RETRY_CACHE") or Path.home() / ".cache" / "airflow-k8s-retry")
    folder = root / "migrated-db" / f"{airflow_version}-{environment_key()}"
    folder.mkdir(parents=True, exist_ok=True)
    db = folder / "airflow.db"
    with (folder / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not db.exists():
            work = folder / "work"
            shutil.rmtree(work, ignore_errors=True)
            (work / "dags").mkdir(parents=True)
            proc = subprocess.run(
                [AIRFLOW, "db", "migrate"],
                env=base_env(work, work / "dags"),
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
            if proc.returncode != 0:
                output = f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
                raise RuntimeError(f"airflow db migrate failed:\n{output}")
            (work / "airflow.db").replace(db)  # whole or not at all: a killed migration leaves none
            shutil.rmtree(work, ignore_errors=True)
        (folder / ".lock").touch()  # its mtime says when the entry was last used
    prune_migrated_databases(folder.parent, keep=folder)
    return db


def prune_migrated_databases(parent: Path, keep: Path, days: float = MIGRATED_DB_KEEP_DAYS) -> list[Path]:
    """Remove the cached databases under ``parent`` (other than ``keep``) not used for ``days``;
    an entry another process holds the lock of is left alone. Returns what was removed."""
    removed: list[Path] = []
    cutoff = time.time() - days * 86400
    for entry in parent.iterdir():
        if entry != keep and _remove_if_unused_since(entry, cutoff):
            removed.append(entry)
    return removed


def _remove_if_unused_since(entry: Path, cutoff: float) -> bool:
    """Remove ``entry`` if its lock file is older than ``cutoff`` and no process holds the lock;
    another process pruning at the same moment may remove it first (then nothing is done here)."""
    import fcntl

    lock_file = entry / ".lock"
    try:
        if lock_file.stat().st_mtime >= cutoff:
            return False
        with lock_file.open("a") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            if lock_file.stat().st_mtime >= cutoff:  # used while this process looked
                return False
            shutil.rmtree(entry)
            return True
    except (FileNotFoundError, NotADirectoryError):  # not an entry, or another process removed it first
        return False


@dataclass(frozen=True)
class TryRecord:
    """One try of one task instance, as the metadata database has it."""

    task_id: str
    try_number: int
    state: str | None
    map_index: int = -1


@dataclass(frozen=True)
class DagRunResult:
    dag_id: str
    returncode: int
    output: str  # stdout and stderr together, in order
    seconds: float
    database: Path
    #: The DAG run (a batch names it): reads are of that run alone. None: of every run of the DAG.
    run_id: str | None = None

    def output_of(self, task_id: str) -> str:
        """What ``dags test`` printed while it ran ``task_id`` (each of its tries and deferrals):
        it runs one task at a time, between its ``[DAG TEST] starting`` and ``end task`` lines."""
        kept: list[str] = []
        inside = False
        for line in self.output.splitlines(keepends=True):
            marker = DAG_TEST_MARKER.search(line)
            if marker:
                inside = marker.group(1) == "starting" and marker.group(2) == task_id
            if inside:
                kept.append(line)
        return "".join(kept)

    def tries(self, task_id: str | None = None) -> list[TryRecord]:
        """Every try of every task instance (history and current), ordered by task and try."""
        return read_tries(self.database, self.dag_id, task_id, self.run_id)

    def retry_delays(self) -> dict[tuple[str, int, int], float]:
        """``(task_id, map_index, try_number)`` -> the delay a retry policy set after that try
        (Airflow 3.3's ``retry_delay_override``); empty on releases without the column."""
        with sqlite3.connect(self.database) as db:
            columns = {r[1] for r in db.execute("pragma table_info(task_instance_history)")}
            if "retry_delay_override" not in columns:
                return {}
            condition, run = of_run(self.run_id)
            rows = db.execute(
                "select task_id, map_index, try_number, retry_delay_override from task_instance_history "
                f"where dag_id = ? and retry_delay_override is not null{condition}",
                (self.dag_id, *run),
            ).fetchall()
        return {(r[0], r[1], r[2]): float(r[3]) for r in rows}

    def final_state(self, task_id: str) -> str | None:
        rows = [
            r for r in self.tries(task_id) if r.try_number == max(t.try_number for t in self.tries(task_id))
        ]
        return rows[-1].state if rows else None

    def dag_run_state(self) -> str | None:
        condition, run = of_run(self.run_id)
        with sqlite3.connect(self.database) as db:
            row = db.execute(
                f"select state from dag_run where dag_id = ?{condition} order by id desc", (self.dag_id, *run)
            ).fetchone()
        return row[0] if row else None

    def xcom(self, task_id: str, key: str = "return_value") -> object:
        condition, run = of_run(self.run_id)
        with sqlite3.connect(self.database) as db:
            row = db.execute(
                f"select value from xcom where dag_id = ? and task_id = ? and key = ?{condition} "
                "order by timestamp desc",
                (self.dag_id, task_id, key, *run),
            ).fetchone()
        if row is None:
            return None
        value = row[0]
        if isinstance(value, bytes):
            value = value.decode()
        return json.loads(value) if isinstance(value, str) else value


def of_run(run_id: str | None) -> tuple[str, tuple[str, ...]]:
    """The SQL condition (and its parameter) that keeps a query to one DAG run; none without a run."""
    return ("", ()) if run_id is None else (" and run_id = ?", (run_id,))


def read_tries(
    database: Path, dag_id: str, task_id: str | None = None, run_id: str | None = None
) -> list[TryRecord]:
    """Every try of the DAG's task instances (of one run, if ``run_id`` is given)."""
    condition, run = of_run(run_id)
    columns = "select task_id, try_number, state, map_index from"
    query = (
        f"{columns} task_instance_history where dag_id = ?{condition} "
        f"union all {columns} task_instance where dag_id = ?{condition}"
    )
    with sqlite3.connect(database) as db:
        rows = db.execute(query, (dag_id, *run, dag_id, *run)).fetchall()
    records = {(r[0], r[3], r[1]): TryRecord(r[0], r[1], r[2], r[3]) for r in rows}
    out = sorted(records.values(), key=lambda r: (r.task_id, r.map_index, r.try_number))
    return [r for r in out if task_id is None or r.task_id == task_id]


def kubernetes_connection(kubeconfig: Path, namespace: str | None = None) -> str:
    """``AIRFLOW_CONN_KUBERNETES_DEFAULT`` in the JSON form both this package and the cncf provider read."""
    extra: dict[str, str] = {"kube_config_path": str(kubeconfig)}
    if namespace:
        extra["namespace"] = namespace
    return json.dumps({"conn_type": "kubernetes", "extra": extra})


@dataclass(frozen=True)
class AirflowHome:
    """One ``AIRFLOW_HOME`` with its own copy of the metadata database."""

    home: Path
    dags_folder: Path

    @classmethod
    def create(cls, home: Path, *, dags_folder: Path, database: MigratedDatabase) -> AirflowHome:
        home.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(database.path, home / "airflow.db")
        return cls(home, dags_folder)

    @property
    def database(self) -> Path:
        return self.home / "airflow.db"

    def env(self, kubeconfig: Path | None = None, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = base_env(self.home, self.dags_folder)
        if kubeconfig is not None:
            env["AIRFLOW_CONN_KUBERNETES_DEFAULT"] = kubernetes_connection(kubeconfig)
        env.update(extra or {})
        return env

    def start_dag(
        self,
        dag_id: str,
        *,
        kubeconfig: Path | None = None,
        extra_env: dict[str, str] | None = None,
        only: str | None = None,
    ) -> subprocess.Popen[str]:
        """Start ``airflow dags test DAG_ID``; wait on it with :meth:`finish`. ``only``: run that
        task alone, the others marked successful without running (``--mark-success-pattern``)."""
        _, args = dags_test_batch.dags_test_args(dag_id if only is None else f"{dag_id}:{only}")
        return self._start([AIRFLOW, *args], kubeconfig, extra_env)

    def _start(
        self, command: list[str], kubeconfig: Path | None, extra_env: dict[str, str] | None
    ) -> subprocess.Popen[str]:
        return subprocess.Popen(
            command,
            env=self.env(kubeconfig, extra_env),
            cwd=self.home,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def finish(
        self, dag_id: str, proc: subprocess.Popen[str], started: float, timeout: float
    ) -> DagRunResult:
        try:
            output, _ = proc.communicate(timeout=max(1.0, timeout - (time.monotonic() - started)))
        except subprocess.TimeoutExpired:
            proc.kill()
            output, _ = proc.communicate()
            raise TimeoutError(
                f"airflow dags test {dag_id} ran over {timeout} s:\n{output[-5000:]}"
            ) from None
        return DagRunResult(dag_id, proc.returncode, output, time.monotonic() - started, self.database)

    def start_dags(
        self,
        dag_ids: Sequence[str],
        *,
        kubeconfig: Path | None = None,
        extra_env: dict[str, str] | None = None,
    ) -> subprocess.Popen[str]:
        """Start ``airflow dags test`` for each of ``dag_ids`` in turn, in one interpreter (Airflow
        starts once: see ``dags_test_batch.py``); wait on it with :meth:`finish_dags`."""
        return self._start([sys.executable, str(BATCH), *dag_ids], kubeconfig, extra_env)

    def finish_dags(
        self, dag_ids: Sequence[str], proc: subprocess.Popen[str], started: float, timeout: float
    ) -> list[DagRunResult]:
        """Each run's result, in order: its own part of the output, its command's exit status and time."""
        batch = self.finish(" ".join(dag_ids), proc, started, timeout)
        results: list[DagRunResult] = []
        lines: list[str] = []
        for line in batch.output.splitlines(keepends=True):
            marker = BATCH_MARKER.match(line.rstrip("\n"))
            if marker is None:
                lines.append(line)
            elif marker.group(1) == dags_test_batch.START:
                lines = []
            else:
                status, seconds, run_id = int(marker.group(3)), float(marker.group(4)), marker.group(5)
                run = None if run_id == "None" else run_id
                results.append(
                    DagRunResult(marker.group(2), status, "".join(lines), seconds, self.database, run)
                )
        if [r.dag_id for r in results] != [dags_test_batch.dags_test_args(d)[0] for d in dag_ids] or (
            batch.returncode != 0
        ):
            raise RuntimeError(
                f"dags test of {list(dag_ids)} ended with exit {batch.returncode} after running "
                f"{[r.dag_id for r in results]}:\n{batch.output[-5000:]}"
            )
        return results

    def run_dags(
        self,
        dag_ids: Sequence[str],
        *,
        kubeconfig: Path | None = None,
        timeout: float = 600,
        extra_env: dict[str, str] | None = None,
    ) -> list[DagRunResult]:
        """``airflow dags test`` of each DAG (a DAG named twice runs twice; ``DAG_ID:TASK_ID`` runs
        that task alone, the others marked successful), one after another, in one interpreter; the
        results in order. Each run mostly waits, and each Airflow process costs
        10-20 s of CPU to start."""
        started = time.monotonic()
        proc = self.start_dags(dag_ids, kubeconfig=kubeconfig, extra_env=extra_env)
        return self.finish_dags(dag_ids, proc, started, timeout)

    def run_dag(
        self,
        dag_id: str,
        *,
        kubeconfig: Path | None = None,
        timeout: float = 180,
        extra_env: dict[str, str] | None = None,
        only: str | None = None,
    ) -> DagRunResult:
        started = time.monotonic()
        proc = self.start_dag(dag_id, kubeconfig=kubeconfig, extra_env=extra_env, only=only)
        return self.finish(dag_id, proc, started, timeout)
