"""``airflow dags test`` for several DAGs, one after another, in one Python interpreter.

Usage: ``python dags_test_batch.py DAG_ID [DAG_ID ...]``, with the environment of an
``airflow dags test`` run (``AIRFLOW_HOME``, the dags folder, the connections). For each DAG it runs
Airflow's own command-line entry point (``airflow.__main__.main``) as ``airflow dags test DAG_ID``
would, and prints a start line and an end line with the command's exit status and wall time
around that DAG's output. Airflow starts once for all of them: each ``airflow`` process costs
10-20 s of CPU before its DAG's first task runs (imports, the DAG bag, the in-process execution
API), and the DAG runs themselves mostly wait.
"""

from __future__ import annotations

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


def run(dag_id: str) -> int:
    from airflow.__main__ import main

    sys.argv = ["airflow", "dags", "test", dag_id]
    try:
        main()
    except SystemExit as exc:
        return exit_status(exc)
    except Exception:  # what the interpreter would print before exiting 1
        traceback.print_exc()
        return 1
    return 0


if __name__ == "__main__":
    for dag_id in sys.argv[1:]:
        print(f"{START} {dag_id}", flush=True)
        started = time.monotonic()
        status = run(dag_id)
        sys.stdout.flush()
        sys.stderr.flush()
        print(f"{END} {dag_id} status={status} seconds={time.monotonic() - started:.1f}", flush=True)
