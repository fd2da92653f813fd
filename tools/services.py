"""Debian's PostgreSQL and Redis servers, each in a throw-away folder, started for a test run and
always stopped: the metadata database and the Celery broker of a production-shape deployment.

PostgreSQL refuses to run as root, so under root (a CI machine, a container) the cluster's folder
is handed to Debian's ``postgres`` user and its commands run through ``runuser``; otherwise they
run as the current user. Durability is switched off (``fsync``, ``synchronous_commit``,
``full_page_writes``): the data is thrown away with the folder.

Example::

    with PostgresServer() as pg, RedisServer() as redis:
        env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = pg.url()
        env["AIRFLOW__CELERY__BROKER_URL"] = redis.url()
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from airflow_k8s_retry_testing.ports import free_port

USER = "airflow"  # the database role the deployment connects as
DATABASE = "airflow"


def postgres_bin() -> Path:
    """The newest installed PostgreSQL's bin folder (Debian keeps each major under its own)."""
    found = sorted(
        (p for p in Path("/usr/lib/postgresql").glob("*/bin") if (p / "initdb").exists()),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
    )
    if not found:
        raise RuntimeError(
            "PostgreSQL is not installed: install Debian's postgresql (make tools does it as root)"
        )
    return found[-1]


def redis_server() -> str:
    path = shutil.which("redis-server")
    if path is None:
        raise RuntimeError(
            "redis-server is not installed: install Debian's redis-server (make tools does it as root)"
        )
    return path


class _Server:
    """A server started on entering a ``with`` block and stopped (its folder removed) on leaving it,
    also when starting it fails half-way."""

    def start(self) -> Self:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


class PostgresServer(_Server):
    """One PostgreSQL cluster on a free loopback port, with an empty ``airflow`` database."""

    def __init__(self, *, max_connections: int = 300, track_statements: bool = False) -> None:
        self.max_connections = max_connections
        #: Load ``pg_stat_statements`` (the contrib module Debian's package ships) so that
        #: :meth:`statements` counts what the clients ran.
        self.track_statements = track_statements
        self.port = free_port()
        self.bin = postgres_bin()
        self.folder = Path(tempfile.mkdtemp(prefix="airflow-k8s-retry-pg-"))
        self.data = self.folder / "data"
        self.log = self.folder / "postgres.log"
        self._as: list[str] = []
        if os.geteuid() == 0:
            owner = pwd.getpwnam("postgres")
            os.chown(self.folder, owner.pw_uid, owner.pw_gid)
            self._as = ["runuser", "-u", "postgres", "--"]

    def _run(self, *args: str, timeout: float = 120) -> None:
        proc = subprocess.run(
            [*self._as, *args], capture_output=True, text=True, timeout=timeout, check=False
        )
        if proc.returncode != 0:
            log = self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""
            raise RuntimeError(
                f"{' '.join(args[:2])} failed: {proc.stdout[-2000:]}{proc.stderr[-2000:]}{log}"
            )

    def url(self, database: str = DATABASE, driver: str = "postgresql+psycopg2", user: str = USER) -> str:
        return f"{driver}://{user}@127.0.0.1:{self.port}/{database}"

    def add_user(self, name: str) -> None:
        """A database user ``name`` with the deployment user's rights (a superuser, as it is), if
        there is none yet: ``pg_stat_statements`` counts each user's statements apart."""
        with contextlib.closing(self.connect("postgres")) as db, db.cursor() as cursor:
            cursor.execute("select 1 from pg_roles where rolname = %s", (name,))
            if cursor.fetchone() is None:
                cursor.execute(f'create role "{name}" superuser login')

    def connect(self, database: str = DATABASE) -> Any:
        import psycopg2  # the deploy extra's; imported only where a server runs

        db = psycopg2.connect(
            host="127.0.0.1", port=self.port, user=USER, dbname=database, connect_timeout=10
        )
        db.autocommit = True
        return db

    def start(self) -> Self:
        self._run(
            str(self.bin / "initdb"),
            "-D",
            str(self.data),
            "-U",
            USER,
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--no-sync",
        )
        self._serve()
        with contextlib.closing(self.connect("postgres")) as db, db.cursor() as cursor:
            cursor.execute(f"create database {DATABASE}")
        if self.track_statements:
            with contextlib.closing(self.connect()) as db, db.cursor() as cursor:
                cursor.execute("create extension if not exists pg_stat_statements")
        return self

    def statements(self) -> int:
        """Statements the ``airflow`` database ran since the last :meth:`reset_statements` (every
        client's, this server's own bookkeeping left out)."""
        with contextlib.closing(self.connect()) as db, db.cursor() as cursor:
            cursor.execute(
                "select coalesce(sum(calls), 0) from pg_stat_statements s join pg_database d "
                "on d.oid = s.dbid where d.datname = %s and s.query not ilike '%%pg_stat_statements%%'",
                (DATABASE,),
            )
            return int(cursor.fetchone()[0])

    def top_statements(self, count: int = 20) -> list[tuple[int, str]]:
        """The ``count`` statements run most often since the last reset: (calls, its text, cut)."""
        with contextlib.closing(self.connect()) as db, db.cursor() as cursor:
            cursor.execute(
                "select calls, left(regexp_replace(query, '\\s+', ' ', 'g'), 200) from pg_stat_statements s "
                "join pg_database d on d.oid = s.dbid where d.datname = %s "
                "and s.query not ilike '%%pg_stat_statements%%' order by calls desc limit %s",
                (DATABASE, count),
            )
            return [(int(calls), str(text)) for calls, text in cursor.fetchall()]

    def reset_statements(self) -> None:
        with contextlib.closing(self.connect()) as db, db.cursor() as cursor:
            cursor.execute("select pg_stat_statements_reset()")

    def _serve(self) -> None:
        options = " ".join(
            [
                f"-p {self.port}",
                f"-k {self.folder}",  # its Unix socket in the throw-away folder, not /var/run
                "-c listen_addresses=127.0.0.1",
                f"-c max_connections={self.max_connections}",
                "-c fsync=off",
                "-c synchronous_commit=off",
                "-c full_page_writes=off",
                *(
                    ["-c shared_preload_libraries=pg_stat_statements", "-c pg_stat_statements.max=10000"]
                    if self.track_statements
                    else []
                ),
            ]
        )
        pg_ctl = str(self.bin / "pg_ctl")
        self._run(pg_ctl, "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "-t", "60", "start")

    def _halt(self, mode: str = "immediate") -> None:
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop", timeout=60)

    @contextlib.contextmanager
    def outage(self) -> Iterator[None]:
        """The server is down inside the block: every connection is cut and new ones are refused;
        it comes back on the same port with the same data. The stop is PostgreSQL's fast shutdown,
        which writes out what was committed: this server runs without fsync and with asynchronous
        commits for speed, so a crash (an immediate stop) could lose the last committed
        transactions, which a production database does not."""
        self._halt("fast")
        try:
            yield
        finally:
            self._serve()

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
                self._halt()
        shutil.rmtree(self.folder, ignore_errors=True)


class RedisServer(_Server):
    """One Redis server on a free loopback port, nothing persisted."""

    def __init__(self) -> None:
        self.port = free_port()
        self.folder = Path(tempfile.mkdtemp(prefix="airflow-k8s-retry-redis-"))
        self.proc: subprocess.Popen[bytes] | None = None

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def _pong(self) -> bool:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
        return False

    def start(self) -> Self:
        with (self.folder / "redis.log").open("wb") as out:
            self.proc = subprocess.Popen(
                [
                    redis_server(),
                    "--port",
                    str(self.port),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--dir",
                    str(self.folder),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 30
        while not self._pong():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                log = (self.folder / "redis.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"redis-server did not start: {log}")
            time.sleep(0.1)
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.folder, ignore_errors=True)
