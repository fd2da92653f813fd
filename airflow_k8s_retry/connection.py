"""How this package reaches a cluster from an Airflow ``kubernetes`` connection: one way per side.

DAG authors already have ``kubernetes`` connections for the cncf provider's
``KubernetesPodOperator``; this package reuses them unchanged (same connection type, same extras,
including the ``extra__kubernetes__`` prefixed names) so switching operators needs no new
connection.

* **Synchronous (the worker, the api-server's kill listener, the CLI):** the cncf provider's own
  ``KubernetesHook`` (:func:`kubernetes_hook`, :func:`pod_client`), exactly as
  ``KubernetesPodOperator`` resolves a connection: in-cluster, kubeconfig file or inline, context,
  exec plugins, TCP keepalive, SSL options.
* **Asynchronous (the triggerer):** :func:`aresolve_cluster_config` turns the connection into a
  :class:`~airflow_k8s_retry.kube.config.ClusterConfig`, which the watch hub
  (:mod:`airflow_k8s_retry.kube.hub`) keys its one shared watch and client by. Not the provider's
  ``AsyncKubernetesHook``: it builds a new ``ApiClient`` for every call (``ssl.create_default_context``
  on the triggerer's event loop and a new connection pool each time; apache/airflow#71349 and
  #73399, open), has no identity to share one watch per cluster by, and does not refresh an exec
  plugin's token on a client that lives for hours. The extras are read by the same rules.

Resolution rules, as in the cncf ``KubernetesHook``: ``None`` means default loading (in-cluster
when running in a pod, else ``KUBECONFIG`` or ``~/.kube/config``); a missing
``kubernetes_default`` connection means the same; any other missing connection is an error.
Connection extras and tokens are never logged or put into messages.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from airflow_k8s_retry.compat import AirflowNotFoundException
from airflow_k8s_retry.kube.config import ClusterConfig, ClusterConfigError
from airflow_k8s_retry.kube.pods import PodClient, keep_response_bodies_out_of_logs

DEFAULT_CONN_ID = "kubernetes_default"
_PREFIX = "extra__kubernetes__"


def chosen_cluster(
    in_cluster: object = None, config_file: object = None, cluster_context: object = None
) -> dict[str, Any] | None:
    """The cluster arguments a task set (``None`` when it set none), checked: one line per mistake."""
    given = (("in_cluster", in_cluster), ("config_file", config_file), ("cluster_context", cluster_context))
    chosen: dict[str, Any] = {k: v for k, v in given if v is not None}
    if "in_cluster" in chosen and not isinstance(chosen["in_cluster"], bool):
        raise ConnectionConfigError(f"in_cluster must be True, False or None, got {in_cluster!r}")
    for name in ("config_file", "cluster_context"):
        value = chosen.get(name)
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise ConnectionConfigError(f"{name} must be a non-empty string or None, got {value!r}")
    return chosen or None


class ConnectionConfigError(ClusterConfigError):
    """An Airflow connection's extras cannot describe a cluster."""


def _field(extras: Mapping[str, Any], name: str) -> Any:
    """An extra by its plain name, else by its ``extra__kubernetes__`` name; empty values count as unset."""
    value = extras[name] if name in extras else extras.get(_PREFIX + name)
    return None if value in ("", None) else value


def _flag(extras: Mapping[str, Any], name: str, conn_id: str | None) -> bool | None:
    value = _field(extras, name)
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ConnectionConfigError(
        f"connection {conn_id!r}: extra {name!r} must be true or false, got a {type(value).__name__}; "
        "fix the connection's extras"
    )


def _looks_like_kubeconfig(value: Mapping[str, Any]) -> bool:
    return "clusters" in value or "contexts" in value


def _kube_config(extras: Mapping[str, Any], conn_id: str | None) -> Mapping[str, Any] | None:
    value = _field(extras, "kube_config")
    if value is None:
        return None
    if isinstance(value, Mapping) and _looks_like_kubeconfig(value):
        return value
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except ValueError:
            import yaml

            try:
                parsed = yaml.safe_load(value)
            except yaml.YAMLError:
                parsed = None
        if isinstance(parsed, Mapping) and _looks_like_kubeconfig(parsed):
            return parsed
    # The value itself may hold credentials: name the problem, never echo the content.
    raise ConnectionConfigError(
        f"connection {conn_id!r}: extra 'kube_config' must be a kubeconfig as a JSON or YAML mapping; "
        "paste the whole kubeconfig file, or use 'kube_config_path' instead"
    )


def cluster_config_from_extras(
    extras: Mapping[str, Any], *, conn_id: str | None = None, chosen: Mapping[str, Any] | None = None
) -> ClusterConfig:
    """Build a :class:`ClusterConfig` from a ``kubernetes`` connection's extras, with a task's
    cluster arguments (``chosen``: ``in_cluster``, when not ``None``, replaces the extra
    ``in_cluster``, ``config_file`` the extra ``kube_config_path``, ``cluster_context`` the extra
    ``cluster_context``, as in the provider's ``KubernetesHook``) laid over them.

    Example::

        >>> cluster_config_from_extras({"kube_config_path": "/etc/kube/config", "namespace": "jobs"}).mode
        'file'
        >>> extras = {"kube_config_path": "/etc/kube/config"}
        >>> cluster_config_from_extras(extras, chosen={"config_file": "/other"}).kube_config_path
        '/other'
    """
    chosen = chosen or {}
    path = chosen.get("config_file") or _field(extras, "kube_config_path")
    if path is not None and not isinstance(path, str):
        raise ConnectionConfigError(f"connection {conn_id!r}: extra 'kube_config_path' must be a string path")
    context = chosen.get("cluster_context") or _field(extras, "cluster_context")
    in_cluster = chosen.get("in_cluster")
    if in_cluster is None:
        in_cluster = bool(_flag(extras, "in_cluster", conn_id))
    if in_cluster:
        context = None  # as the provider's hook: a context means nothing in-cluster
    namespace = _field(extras, "namespace")
    disable_verify_ssl = _flag(extras, "disable_verify_ssl", conn_id)
    kube_config = _kube_config(extras, conn_id)
    try:
        return ClusterConfig(
            kube_config_path=path,
            kube_config=kube_config,
            in_cluster=in_cluster,
            cluster_context=str(context) if context is not None else None,
            verify_ssl=disable_verify_ssl is not True,
            namespace=str(namespace) if namespace is not None else None,
            source=f"connection {conn_id}" if conn_id else None,
        )
    except ClusterConfigError as exc:
        raise ConnectionConfigError(f"{exc}; fix the extras of connection {conn_id!r}") from None


def _without_connection(conn_id: str | None, chosen: Mapping[str, Any] | None) -> ClusterConfig:
    source = f"connection {conn_id} (absent: default kubeconfig)" if conn_id else None
    if not chosen:
        return ClusterConfig(source=source)
    return cluster_config_from_extras({}, conn_id=conn_id, chosen=chosen)


async def aresolve_cluster_config(
    conn_id: str | None, chosen: Mapping[str, Any] | None = None
) -> ClusterConfig:
    """Resolve ``conn_id`` (and a task's cluster arguments) from async code, the triggerer, without
    blocking the event loop."""
    if not conn_id:
        return _without_connection(None, chosen)
    from airflow.providers.common.compat.connection import get_async_connection, get_async_extra_dejson

    try:
        connection = await get_async_connection(conn_id)
    except AirflowNotFoundException:
        if conn_id == DEFAULT_CONN_ID:
            return _without_connection(conn_id, chosen)
        raise
    extras = await get_async_extra_dejson(connection)
    return cluster_config_from_extras(extras or {}, conn_id=conn_id, chosen=chosen)


def pod_client(
    conn_id: str | None, namespace: str | None, chosen: Mapping[str, Any] | None = None
) -> tuple[PodClient, str]:
    """A synchronous pod client for the connection, and the namespace to work in.

    The client comes from the cncf provider's ``KubernetesHook`` (in-cluster, kubeconfig file or
    inline, context, exec plugins, TCP keepalive, SSL options, exactly as ``KubernetesPodOperator``
    resolves them); every request carries a timeout (:class:`PodClient`). The namespace is the one
    asked for, else the connection's, else ``default``. Close the client when done.
    """
    hook = kubernetes_hook(conn_id, chosen)
    return PodClient(hook.api_client), namespace or hook.get_namespace() or "default"


def kubeconfig_of(conn_id: str) -> str | None:
    """The kubeconfig file connection ``conn_id`` names (its ``kube_config_path`` extra), or
    ``None`` (none named, or the connection cannot be read): for saying what is wrong."""
    from airflow.sdk import BaseHook

    try:
        path = _field(BaseHook.get_connection(conn_id).extra_dejson or {}, "kube_config_path")
    except Exception:
        return None
    return str(path) if path else None


def deployment_id() -> str:
    """This Airflow deployment's ``[kubernetes_retry] deployment_id`` (empty when unset): it labels
    this deployment's pods, so deployments sharing a namespace never touch each other's."""
    from airflow.providers.common.compat.sdk import conf

    return str(conf.get("kubernetes_retry", "deployment_id", fallback="") or "")


def kubernetes_hook(conn_id: str | None, chosen: Mapping[str, Any] | None = None) -> Any:
    """The cncf provider's ``KubernetesHook`` for ``conn_id``, with a task's cluster arguments.

    ``None`` means default loading, as in the trigger: in-cluster, else ``KUBECONFIG`` as it is
    when the task runs (the client library reads it once, at import), else ``~/.kube/config``.
    """
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

    keep_response_bodies_out_of_logs()  # the hook's client logs pod specs (env values) at DEBUG
    chosen = chosen or {}
    path = os.environ.get("KUBECONFIG") if not conn_id and not chosen.get("in_cluster") else None
    if path and os.pathsep in path:
        path = None  # several files: leave it to the client's own default loading
    return KubernetesHook(
        conn_id=conn_id,
        config_file=chosen.get("config_file") or path,
        in_cluster=chosen.get("in_cluster"),
        cluster_context=chosen.get("cluster_context"),
    )
