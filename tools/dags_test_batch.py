"""``airflow dags test`` for several DAGs, one after another, in one Python interpreter.

Usage: ``python dags_test_batch.py RUN [RUN ...]``, with the environment of an
``airflow dags test`` run (``AIRFLOW_HOME``, the dags folder, the connections). A RUN is a DAG id,
or ``DAG_ID:TASK_ID`` to run that task alone (the others marked successful without running, as
``--mark-success-pattern`` does). For each it runs Airflow's own command-line entry point
(``airflow.__main__.main``) as ``airflow dags test DAG_ID`` would, and prints a start line and an end
line (with the DAG id, the command's exit status, wall time and the DAG run's id) around that run's
output. Airflow starts once for all of them: each ``airflow`` process costs
10-20 s of CPU before its DAG's first task runs (imports, the DAG bag, the in-process execution
API), and the DAG runs themselves mostly wait.
"""

from __future__ import annotations

import re
import sys
import time
import traceback

START = "[DAGS TEST BATCH] start"
END = "[DAGS TEST BATCH] end"


def exit_status(exc: SystemExit) -> int:
    """The status the interpreter would exit with for ``exc`` (printing its message, as it would)."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr, flush=True)
    return 1


def only_pattern(task_id: str) -> str:
    """The ``--mark-success-pattern`` that runs ``task_id`` alone: every other task id matches."""
    return f"(?!{re.escape(task_id)}$).*"


def dags_test_args(run: str) -> tuple[str, list[str]]:
    """The DAG id of a RUN, and the arguments of its ``airflow dags test``."""
    dag_id, _, only = run.partition(":")
    return dag_id, ["dags", "test", dag_id, *(["--mark-success-pattern", only_pattern(only)] if only else [])]


def run(dag_run: str) -> int:
    from airflow.__main__ import main

    sys.argv = ["airflow", *dags_test_args(dag_run)[1]]
    try:
        main()
    except SystemExit as exc:
        return exit_status(exc)
    except Exception:  # what the interpreter would print before exiting 1
        traceback.print_exc()
        return 1
    return 0


def last_run_id(dag_id: str) -> str | None:
    """The id of the DAG's newest run in the metadata database (the one just tested)."""
    try:
        from airflow.models.dagrun import DagRun
        from airflow.utils.session import create_session
        from sqlalchemy import select

        with create_session() as session:
            newest = select(DagRun.run_id).where(DagRun.dag_id == dag_id).order_by(DagRun.id.desc()).limit(1)
            return session.scalar(newest)
    except Exception:  # no run, or no database: the caller reads the DAG's runs as a whole
        return None


if __name__ == "__main__":
    for dag_run in sys.argv[1:]:
        dag_id = dags_test_args(dag_run)[0]
        print(f"{START} {dag_id}", flush=True)
        started = time.monotonic()
        status = run(dag_run)
        sys.stdout.flush()
        sys.stderr.flush()
        seconds = time.monotonic() - started
        print(
            f"{END} {dag_id} status={status} seconds={seconds:.1f} run_id={last_run_id(dag_id)}", flush=True
        )
