"""A real Airflow deployment in the shape users run: PostgreSQL for the metadata database,
CeleryExecutor with a Redis broker and two Celery workers, two schedulers, two triggerers and the
api-server, each its own process group. ``AIRFLOW_K8S_RETRY_DEPLOYMENT=local`` gives a lighter
shape: PostgreSQL with one scheduler running LocalExecutor (and the same two triggerers).

The deployment tier (``tests/deployment``) runs it against the simulator; the soak
(``tests/soak``) against the real control plane. :func:`running_deployment` starts it and always
stops it; :class:`Deployment` looks at and acts on it (its processes, the REST API, the metadata
database, and, on the simulator, the pods).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from airflow_k8s_retry_testing.ports import free_port
from tools.airflow_runner import AIRFLOW, AirflowHome
from tools.services import PostgresServer, RedisServer

if TYPE_CHECKING:
    from airflow_k8s_retry_testing import FakeCluster


class Cluster(Protocol):
    """What the deployment needs of a cluster: its kubeconfig (the simulator has more, which the
    deployment tier's pod helpers use)."""

    @property
    def kubeconfig(self) -> Path: ...


#: A triggerer whose heartbeat is older than this loses its triggers to a live one.
HEALTH_THRESHOLD = 6
#: Seconds without a heartbeat after which the scheduler fails a running task instance.
TI_HEARTBEAT_TIMEOUT = 45
POLL = 0.5  # seconds between looks at the other processes' state

T = TypeVar("T")


#: The deployment's shape: "celery" (two schedulers, two Celery workers) or "local" (one scheduler).
SHAPE = os.environ.get("AIRFLOW_K8S_RETRY_DEPLOYMENT", "celery")
if SHAPE not in ("celery", "local"):
    raise ValueError(f"AIRFLOW_K8S_RETRY_DEPLOYMENT={SHAPE!r}: use 'celery' or 'local'")
SCHEDULERS = ("scheduler-a", "scheduler-b") if SHAPE == "celery" else ("scheduler",)
WORKERS = ("worker-a", "worker-b") if SHAPE == "celery" else ()
TRIGGERERS = ("triggerer-a", "triggerer-b")


class Deployment:
    """The running processes, the simulator they talk to, and ways to look at and act on them."""

    def __init__(
        self,
        root: Path,
        home: AirflowHome,
        cluster: Cluster,
        database: PostgresServer,
        broker: RedisServer | None,
        settings: dict[str, str] | None = None,
    ) -> None:
        self.root = root
        self.home = home
        self.cluster = cluster
        self.database = database
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        executor: dict[str, str] = {"AIRFLOW__CORE__EXECUTOR": "LocalExecutor"}
        if broker is not None:
            executor = {
                "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
                "AIRFLOW__CELERY__BROKER_URL": broker.url(),
                "AIRFLOW__CELERY__RESULT_BACKEND": "db+" + database.url(),
                "AIRFLOW__CELERY__WORKER_CONCURRENCY": "1",
                # Sending a task to the broker on a busy 2-core machine can take more than 1 s.
                "AIRFLOW__CELERY__OPERATION_TIMEOUT": "15",
            }
        self.env = home.env(
            cluster.kubeconfig,
            {
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": database.url(),
                **executor,
                # One executor slot per scheduler, one process per Celery worker: tasks that are
                # deferred at the same time, more of them than there are slots, prove the worker free.
                "AIRFLOW__CORE__PARALLELISM": "1",
                "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.base_url}/execution/",
                "AIRFLOW__API__BASE_URL": self.base_url,
                "AIRFLOW__API__HOST": "127.0.0.1",
                "AIRFLOW__API__PORT": str(self.port),
                "AIRFLOW__API_AUTH__JWT_SECRET": "deployment-test-only-" + os.urandom(8).hex(),
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
                "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
                "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "1",
                "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": str(HEALTH_THRESHOLD),
                # A dead worker's try is failed (and its failure callbacks sent) this long after its
                # last heartbeat; live workers heartbeat every few seconds.
                "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": str(TI_HEARTBEAT_TIMEOUT),
                **(settings or {}),
            },
        )
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.commands: dict[str, tuple[str, ...]] = {}  # process name -> its airflow arguments
        self.extra_env: dict[str, dict[str, str]] = {}  # process name -> its own settings
        self.triggerer_jobs: dict[str, int] = {}  # process name -> its TriggererJob id
        self._token: str | None = None
        self._db: Any = None

    # -- processes ------------------------------------------------------------------------------

    def log_path(self, name: str) -> Path:
        return self.root / f"{name}.log"

    def log(self, name: str) -> str:
        return self.log_path(name).read_text(errors="replace")

    def start(self, name: str, *args: str, env: dict[str, str] | None = None) -> None:
        """Start ``airflow ARGS`` as process ``name``, with ``env`` over the deployment's settings."""
        self.commands[name] = args
        self.extra_env[name] = dict(env or {})
        with self.log_path(name).open("ab") as out:
            self.procs[name] = subprocess.Popen(
                [AIRFLOW, *args],
                env={**self.env, **self._database_user(name), **self.extra_env[name]},
                cwd=self.home.home,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: signals reach its children too
            )

    def trigger_logs(self, name: str, dag_id: str | None = None) -> str:
        """What triggerer ``name`` wrote: its own output and its trigger log files (of one DAG, if given)."""
        job = self.triggerer_jobs[name]
        under = self.home.home / "logs" / (f"dag_id={dag_id}" if dag_id else "")
        files = sorted(under.rglob(f"*trigger.{job}.log")) if under.exists() else []
        own = [] if dag_id else [self.log(name)]
        return "\n".join([*own, *(f.read_text(errors="replace") for f in files)])

    def lines_about(self, name: str, dag_id: str, *marks: str) -> list[str]:
        """The lines triggerer ``name`` wrote that hold one of ``marks`` (a run id, a pod name), in
        its trigger log files of ``dag_id`` and in its own output: a line a trigger logs after
        Airflow closed the trigger's log file (``on_kill``'s work outlives the trigger) goes there."""
        text = self.trigger_logs(name, dag_id) + "\n" + self.log(name)
        return [line for line in text.splitlines() if any(mark in line for mark in marks)]

    def _database_user(self, name: str) -> dict[str, str]:
        """Where the database counts statements, process ``name`` connects as a user named after its
        role (``scheduler`` for ``scheduler-a``, ``api_server``): the counts tell the roles apart."""
        if not self.database.track_statements:
            return {}
        role = name.removesuffix("-a").removesuffix("-b").replace("-", "_")
        self.database.add_user(role)
        url = self.database.url(user=role)
        out = {"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": url}
        if "AIRFLOW__CELERY__RESULT_BACKEND" in self.env:
            out["AIRFLOW__CELERY__RESULT_BACKEND"] = "db+" + url
        return out

    def signal(self, name: str, sig: signal.Signals) -> None:
        os.killpg(self.procs[name].pid, sig)

    def freeze(self, *names: str) -> None:
        """Stop the named processes (SIGSTOP): alive to the operating system, silent to Airflow."""
        for name in names:
            self.signal(name, signal.SIGSTOP)

    def thaw(self, *names: str) -> None:
        for name in names:
            self.signal(name, signal.SIGCONT)

    def start_triggerer(self, name: str, env: dict[str, str] | None = None) -> None:
        known = set(self._triggerer_job_ids())  # every job so far, a killed triggerer's included
        self.start(name, "triggerer", env=env)
        job = self.wait(
            lambda: next(iter(set(self._triggerer_job_ids()) - known), None),
            60,
            f"a TriggererJob row for {name}",
        )
        self.triggerer_jobs[name] = job

    def restart_exited(self) -> list[str]:
        """Start again every process that has exited, as a process supervisor would; their names."""
        exited = [name for name, proc in self.procs.items() if proc.poll() is not None]
        for name in exited:
            if name in self.triggerer_jobs:
                self.start_triggerer(name, self.extra_env.get(name))
            else:
                self.start(name, *self.commands[name], env=self.extra_env.get(name))
        return exited

    def stop(self, *names: str) -> None:
        """SIGTERM the named processes and wait for them to exit (Airflow's own graceful stop)."""
        for name in names:
            self.signal(name, signal.SIGTERM)
        for name in names:
            try:
                self.procs[name].wait(60)
            except subprocess.TimeoutExpired:
                self.signal(name, signal.SIGKILL)
                self.procs[name].wait()

    def stop_all(self) -> None:
        if self._db is not None:
            self._db.close()
        for proc in self.procs.values():
            if proc.poll() is None:
                for sig in (signal.SIGCONT, signal.SIGTERM):  # a frozen process must wake to stop
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, sig)
        deadline = time.monotonic() + 20
        for proc in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(max(0.1, deadline - time.monotonic()))
        for proc in self.procs.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # stragglers, and any child left in the group
            proc.wait()

    # -- REST API ------------------------------------------------------------------------------

    def api(self, method: str, path: str, body: Any = None, *, auth: bool = True) -> Any:
        headers = {"Content-Type": "application/json"}
        if auth:
            headers["Authorization"] = f"Bearer {self.token()}"
        request = urllib.request.Request(
            self.base_url + path,
            data=None if body is None else json.dumps(body).encode(),
            method=method,
            headers=headers,
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            raise AssertionError(f"{method} {path} answered {exc.code}: {exc.read()[:2000]!r}") from None

    def token(self) -> str:
        if self._token is None:
            self._token = str(self.api("GET", "/auth/token", auth=False)["access_token"])
        return self._token

    def health(self) -> dict[str, Any]:
        try:
            return dict(self.api("GET", "/api/v2/monitor/health", auth=False))
        except (OSError, AssertionError):
            return {}

    def execution_api_ready(self) -> bool:
        """Whether the api-server's execution API answers its health check."""
        try:
            self.api("GET", "/execution/health", auth=False)
        except (OSError, AssertionError):
            return False
        return True

    def trigger_dag(self, dag_id: str) -> str:
        run = self.api("POST", f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": None})
        return str(run["dag_run_id"])

    # -- metadata database ----------------------------------------------------------------------

    def query(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        """Rows of ``sql`` (``?`` placeholders) from the metadata database, in autocommit."""
        import psycopg2

        for attempt in (1, 2):
            if self._db is None or self._db.closed:
                self._db = self.database.connect()
            try:
                with self._db.cursor() as cursor:
                    cursor.execute(sql.replace("?", "%s"), params)
                    return [tuple(row) for row in cursor.fetchall()]
            except (psycopg2.OperationalError, psycopg2.InterfaceError):
                # The server went away since the last query (a database outage test): reconnect once.
                self._db.close()
                if attempt == 2:
                    raise
        raise AssertionError("not reached")

    def _triggerer_job_ids(self) -> list[int]:
        return [r[0] for r in self.query("select id from job where job_type = 'TriggererJob' order by id")]

    def task_states(self, dag_id: str, run_id: str) -> dict[str, tuple[int, str | None]]:
        """task_id -> (try_number, state) of the current try."""
        rows = self.query(
            "select task_id, try_number, state from task_instance where dag_id = ? and run_id = ?",
            dag_id,
            run_id,
        )
        return {r[0]: (int(r[1]), r[2]) for r in rows}

    def tries(self, dag_id: str, run_id: str, task_id: str) -> list[tuple[int, str | None]]:
        """(try_number, state) of every try of one task, history included, in order."""
        rows = self.query(
            "select try_number, state from task_instance_history where dag_id = ? and run_id = ? "
            "and task_id = ? union select try_number, state from task_instance where dag_id = ? "
            "and run_id = ? and task_id = ? order by 1",
            dag_id,
            run_id,
            task_id,
            dag_id,
            run_id,
            task_id,
        )
        return [(int(r[0]), r[1]) for r in rows]

    def dag_run_state(self, dag_id: str, run_id: str) -> str | None:
        rows = self.query("select state from dag_run where dag_id = ? and run_id = ?", dag_id, run_id)
        return rows[0][0] if rows else None

    def trigger_holder(self, dag_id: str, run_id: str, task_id: str) -> str | None:
        """The name of the triggerer process running this task instance's trigger, if any."""
        rows = self.query(
            "select t.triggerer_id from task_instance ti join trigger t on t.id = ti.trigger_id "
            "where ti.dag_id = ? and ti.run_id = ? and ti.task_id = ?",
            dag_id,
            run_id,
            task_id,
        )
        job = rows[0][0] if rows else None
        return next((name for name, j in self.triggerer_jobs.items() if j == job), None)

    # -- simulator ------------------------------------------------------------------------------

    def simulator(self) -> FakeCluster:
        """The cluster, which the pod helpers below read as the simulator (its records)."""
        from airflow_k8s_retry_testing import FakeCluster

        if not isinstance(self.cluster, FakeCluster):
            kind = type(self.cluster).__name__
            raise TypeError(f"the deployment runs on {kind}; these helpers read a FakeCluster's records")
        return self.cluster

    def pods_of(self, dag_id: str) -> list[dict[str, Any]]:
        """Every pod ever created for ``dag_id`` (live and deleted), in creation order."""
        return [
            p
            for p in self.simulator().all_pods()
            if (p["metadata"].get("labels") or {}).get("dag_id") == dag_id
        ]

    def live_pods(self, dag_id: str) -> list[dict[str, Any]]:
        """The pods of ``dag_id`` that exist now."""
        return [
            p for p in self.simulator().pods() if (p["metadata"].get("labels") or {}).get("dag_id") == dag_id
        ]

    def pod_requests(self, verb: str, dag_id: str) -> list[dict[str, Any]]:
        names = {p["metadata"]["name"] for p in self.pods_of(dag_id)}
        return [
            r
            for r in self.simulator().audit_records()
            if r.get("kind") == "request"
            and r.get("resource") == "pods"
            and r.get("verb") == verb
            and (r.get("name") in names or (r.get("labels") or {}).get("dag_id") == dag_id)
        ]

    # -- waiting ------------------------------------------------------------------------------

    def wait_healthy(self, what: str) -> None:
        """Until the api-server reports the database, a scheduler and a triggerer healthy."""
        parts = ("metadatabase", "scheduler", "triggerer")
        self.wait(
            lambda: all((self.health().get(part) or {}).get("status") == "healthy" for part in parts),
            90,
            what,
            self.health,
        )

    def wait_deferred(self, dag_id: str, run_id: str, task_id: str) -> None:
        self.wait(
            lambda: self.task_states(dag_id, run_id).get(task_id, (0, None))[1] == "deferred",
            90,
            f"{dag_id}.{task_id} to defer",
            lambda: self.task_states(dag_id, run_id),
        )

    def wait(
        self,
        probe: Callable[[], T | None],
        timeout: float,
        what: str,
        describe: Callable[[], object] | None = None,
    ) -> T:
        """Poll ``probe`` until it returns something truthy (and return that); fail with the state seen."""
        deadline = time.monotonic() + timeout
        while True:
            value = probe()
            if value:
                return value
            if time.monotonic() > deadline:
                for name, proc in self.procs.items():
                    if proc.poll() is not None:
                        what += f"; {name} exited with {proc.returncode}"
                state = describe() if describe is not None else None
                raise AssertionError(f"timed out after {timeout} s waiting for {what}; state: {state}")
            time.sleep(POLL)


def airflow_command(dep: Deployment, *args: str, timeout: float = 300) -> None:
    """Run one ``airflow`` command to completion in the deployment's environment."""
    proc = subprocess.run(
        [AIRFLOW, *args],
        env=dep.env,
        cwd=dep.home.home,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert proc.returncode == 0, f"airflow {' '.join(args)}: {proc.stdout[-3000:]}{proc.stderr[-3000:]}"


@contextlib.contextmanager
def running_deployment(
    root: Path,
    dags: Path,
    cluster: Cluster,
    *,
    settings: dict[str, str] | None = None,
    worker_concurrency: int = 1,
    reserialize_timeout: float = 120,
    track_statements: bool = False,
) -> Iterator[Deployment]:
    """PostgreSQL, Redis (for Celery) and every Airflow process of the shape, migrated, the DAGs in
    ``dags`` serialized, all of it healthy; stopped whatever happens. ``settings`` are Airflow
    settings (environment variables) over the deployment's own; ``track_statements`` has the
    database count the statements it runs (``dep.database.statements()``), each process's role
    as a database user of its own."""
    (root / "home").mkdir(parents=True, exist_ok=True)
    home = AirflowHome(root / "home", dags)
    with contextlib.ExitStack() as stack:
        database = stack.enter_context(PostgresServer(track_statements=track_statements))
        broker = stack.enter_context(RedisServer()) if WORKERS else None
        dep = Deployment(root, home, cluster, database, broker, settings)
        if broker is not None:
            dep.env["AIRFLOW__CELERY__WORKER_CONCURRENCY"] = str(worker_concurrency)
        try:
            airflow_command(dep, "db", "migrate")
            airflow_command(dep, "dags", "reserialize", timeout=reserialize_timeout)
            dep.start("api-server", "api-server", "--port", str(dep.port))
            for name in SCHEDULERS:
                dep.start(name, "scheduler")
            for name in WORKERS:
                dep.start(
                    name,
                    "celery",
                    "worker",
                    "--concurrency",
                    str(worker_concurrency),
                    "--celery-hostname",
                    f"{name}@%h",
                    "--skip-serve-logs",
                )
            for name in TRIGGERERS:
                dep.start_triggerer(name)
            dep.wait_healthy("api-server, schedulers and triggerers to report healthy")
            # The api-server builds its execution API (every version of every route) on the first
            # request to it: 3.7 s on an idle machine, 5.1 s on a loaded one, where the first
            # task's start (a worker's 5 s ``[workers] execution_api_timeout``) timed out and was
            # retried. Made once here, so no test's first task pays it.
            dep.wait(dep.execution_api_ready, 120, "the execution API to answer")
            dep.wait(
                lambda: all(" ready." in dep.log(name) for name in WORKERS) or not WORKERS,
                90,
                "the Celery workers to be ready",
                lambda: {name: dep.log(name)[-500:] for name in WORKERS},
            )
            yield dep
        finally:
            dep.stop_all()
