"""Read a live pod and its Events for ``airflow-k8s-retry explain --pod NAME``.

``explain`` classifies saved JSON; on a running platform the question is about a pod that exists
now. This reads it the way the operator reaches its cluster, through the cncf provider's
``KubernetesHook`` (which loads Airflow): an Airflow ``kubernetes`` connection (``--conn-id``), or
else the default kubeconfig (``KUBECONFIG``, ``~/.kube/config``, or in-cluster). A pod
this package is watching carries the trigger's classifier history (first-seen times of each
signal) as an annotation; with it, the verdict is the one the trigger would reach now, not a guess
from ``--elapsed``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from airflow_k8s_retry.classification import History, Verdict
from airflow_k8s_retry.kube.errors import KubeError
from airflow_k8s_retry.kube.naming import RELAUNCH_LABEL, read_history, read_stamp


class LivePodError(Exception):
    """The pod cannot be read; the message says what is wrong and how to fix it, on one line."""


@dataclass(frozen=True)
class LivePod:
    """A pod as the cluster has it now, its Events, and what this package stamped on it."""

    pod: Mapping[str, Any]
    events: list[Mapping[str, Any]]
    namespace: str
    source: str
    history: History | None
    stamped: Verdict | None
    relaunches: int


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``--pod``, ``-n`` and ``--conn-id`` options of ``explain``."""
    parser.add_argument(
        "--pod", dest="live_pod", metavar="NAME", help="read pod NAME from the cluster instead of a file"
    )
    parser.add_argument(
        "-n",
        "--namespace",
        metavar="NS",
        help="namespace of --pod (default: the connection's or kubeconfig's)",
    )
    parser.add_argument(
        "--conn-id",
        metavar="ID",
        help="Airflow kubernetes connection to read --pod through (default: the kubeconfig)",
    )


def read_live_pod(name: str, namespace: str | None, conn_id: str | None) -> LivePod:
    """Read pod ``name`` and its Events; :class:`LivePodError` when it cannot be read."""
    # The provider's hook (and so Airflow) loads only when a live pod is read: the CLI stays light.
    from airflow_k8s_retry import connection
    from airflow_k8s_retry.compat import AirflowNotFoundException

    source = f"connection {conn_id!r}" if conn_id else "the default kubeconfig"
    try:
        with _stdout_on_stderr():
            client, ns = connection.pod_client(conn_id, namespace)
    except AirflowNotFoundException:
        raise LivePodError(
            f"there is no Airflow connection {conn_id!r}; create it, or pass another --conn-id"
        ) from None
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        raise LivePodError(f"cannot load the cluster configuration from {source}: {first}") from None
    try:
        pod = client.read(ns, name)
        if pod is None:
            raise LivePodError(
                f"pod {ns}/{name} not found through {source}; check the name and the namespace (-n)"
            )
        uid = (pod.get("metadata") or {}).get("uid")
        events = client.events(ns, name, str(uid) if uid else None)
    except KubeError as exc:
        raise LivePodError(
            f"cannot read pod {ns}/{name} through {source}: HTTP {exc.status}: {exc}"
        ) from None
    finally:
        client.close()
    stamped = read_stamp(pod)
    label = str(((pod.get("metadata") or {}).get("labels") or {}).get(RELAUNCH_LABEL, "0"))
    return LivePod(
        pod=pod,
        events=list(events),
        namespace=ns,
        source=source,
        history=read_history(pod),
        stamped=stamped.verdict if stamped is not None else None,
        relaunches=int(label) if label.isdigit() else 0,
    )


@contextlib.contextmanager
def _stdout_on_stderr() -> Iterator[None]:
    """Airflow logs to the process's stdout; while it loads, that goes to stderr instead, so the
    output of ``explain --json`` stays one JSON object."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
