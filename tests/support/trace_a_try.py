"""``airflow dags test`` of one DAG, recording which of the package's modules run code in each part
of its task's try: the worker from ``execute`` to the deferral, the trigger, and the worker from its
resume (``resume_execution``, which calls ``execute_complete``) to the exception it raises.

Usage: ``python trace_a_try.py OUT.json DAG_ID``, with the environment of an ``airflow dags test``
run. A profiler (``sys.setprofile``, in every thread) is on from the first ``execute`` to the end of
the first resume; a module counts when one of its functions is called (a module that
is only imported, or whose class is only named, does not). The modules are written to ``OUT.json``
by part, as dotted names.
"""

from __future__ import annotations

import functools
import json
import sys
import threading
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import airflow_k8s_retry
from airflow_k8s_retry.operators.pod import RetryingPodOperator

PACKAGE = Path(airflow_k8s_retry.__file__).parent
#: The part of the try now: "execute", "trigger", "resume", then "after".
part = ["before"]
ran: dict[str, set[str]] = defaultdict(set)


def module_of(filename: str) -> str:
    relative = Path(filename).relative_to(PACKAGE.parent).with_suffix("")
    return ".".join(relative.parts).removesuffix(".__init__")


def profile(frame: FrameType, event: str, arg: Any) -> None:
    if event == "call" and frame.f_code.co_filename.startswith(str(PACKAGE)):
        ran[part[0]].add(module_of(frame.f_code.co_filename))


def traced(name: str, after: str, method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if part[0] in ("before", "trigger"):
            if part[0] == "before":
                threading.setprofile(profile)
                sys.setprofile(profile)
            part[0] = name
        try:
            return method(*args, **kwargs)
        finally:
            if part[0] == name:
                part[0] = after
                if after == "after":
                    sys.setprofile(None)
                    threading.setprofile(None)  # type: ignore[arg-type]

    return wrapper


def main() -> int:
    out, dag_id = Path(sys.argv[1]), sys.argv[2]
    RetryingPodOperator.execute = traced("execute", "trigger", RetryingPodOperator.execute)  # type: ignore[method-assign]
    RetryingPodOperator.resume_execution = traced(  # type: ignore[method-assign]
        "resume", "after", RetryingPodOperator.resume_execution
    )
    from airflow.__main__ import main as airflow_main

    sys.argv = ["airflow", "dags", "test", dag_id]
    status = 0
    try:
        airflow_main()
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else 1
    out.write_text(json.dumps({name: sorted(modules) for name, modules in ran.items()}, indent=1))
    return status


if __name__ == "__main__":
    sys.exit(main())
