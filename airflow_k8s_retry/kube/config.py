"""Which cluster the triggerer talks to, as one frozen value, and the async client for it.

The triggerer's watch hub must know when two triggers talk to the same cluster so they can share
one watch and one client: :class:`ClusterConfig` is the description of a cluster (from an Airflow
connection, :mod:`airflow_k8s_retry.connection`) and :attr:`ClusterConfig.key` its identity. The
synchronous side (the worker) uses the cncf provider's ``KubernetesHook`` instead.

Loading follows the cncf provider's ``KubernetesHook``: in-cluster, a kubeconfig file, an inline
kubeconfig, or (when none is given) in-cluster if available, else the default kubeconfig
(``KUBECONFIG``, then ``~/.kube/config``). Each client gets its own ``Configuration``; the
process-wide default configuration of the client libraries is never touched.

Example::

    config = ClusterConfig(kube_config_path="/tmp/fake/kubeconfig")
    aapi = await async_api_client(config)    # kubernetes_asyncio.client.ApiClient
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import time
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import psutil

from airflow_k8s_retry.kube.errors import TransportError
from airflow_k8s_retry.kube.pods import keep_response_bodies_out_of_logs

if TYPE_CHECKING:
    import kubernetes_asyncio.client

log = logging.getLogger(__name__)

DEFAULT_KUBECONFIG = "~/.kube/config"
#: How long a run of a kubeconfig credential plugin may take when a token is refreshed: one that
#: hangs must fail the requests waiting for it, not hang them.
PLUGIN_TIMEOUT = 60.0
#: kubernetes_asyncio sets it in every credential plugin's environment (the Kubernetes convention).
_PLUGIN_MARKER = "KUBERNETES_EXEC_INFO"

T = TypeVar("T")


class ClusterConfigError(ValueError):
    """A cluster description is contradictory or incomplete."""


@dataclass(frozen=True, repr=False)
class ClusterConfig:
    """How to reach one Kubernetes cluster.

    At most one of ``kube_config_path``, ``kube_config`` and ``in_cluster`` may be given; with none,
    the default loading applies (in-cluster when running in a pod, else ``KUBECONFIG`` or
    ``~/.kube/config``).

    :param kube_config_path: path of a kubeconfig file.
    :param kube_config: a whole kubeconfig as a mapping (never logged).
    :param in_cluster: use the pod's service account.
    :param cluster_context: kubeconfig context to use instead of the current one.
    :param verify_ssl: verify the API server's certificate (``False`` only for test clusters).
    :param namespace: the connection's default namespace, if it names one.
    :param source: a human label for messages (e.g. the Airflow connection id); not part of the key.
    """

    kube_config_path: str | None = None
    kube_config: Mapping[str, Any] | None = None
    in_cluster: bool = False
    cluster_context: str | None = None
    verify_ssl: bool = True
    namespace: str | None = None
    source: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        chosen = [name for name in ("kube_config_path", "kube_config", "in_cluster") if getattr(self, name)]
        if len(chosen) > 1:
            raise ClusterConfigError(
                f"cluster config{self._where()}: {' and '.join(chosen)} are mutually exclusive; "
                "give only one of kube_config_path, kube_config and in_cluster"
            )
        if self.kube_config is not None and not isinstance(self.kube_config, Mapping):
            raise ClusterConfigError(
                f"cluster config{self._where()}: kube_config must be a mapping (a parsed kubeconfig), "
                f"got {type(self.kube_config).__name__}"
            )
        if self.in_cluster and self.cluster_context:
            raise ClusterConfigError(
                f"cluster config{self._where()}: cluster_context has no meaning with in_cluster=True; "
                "drop one of them"
            )

    def _where(self) -> str:
        return f" ({self.source})" if self.source else ""

    @property
    def mode(self) -> str:
        """How the client will be configured: ``in_cluster``, ``file``, ``inline`` or ``default``."""
        if self.in_cluster:
            return "in_cluster"
        if self.kube_config_path:
            return "file"
        if self.kube_config:
            return "inline"
        return "default"

    @property
    def key(self) -> str:
        """A stable identity: equal for configs that reach the same cluster the same way.

        Contains a digest of the inline kubeconfig, never the kubeconfig itself, so it is safe to log.
        """
        path = self.kube_config_path
        material = {
            "mode": self.mode,
            "path": os.path.abspath(os.path.expanduser(path)) if path else None,
            "inline": json.dumps(self.kube_config, sort_keys=True, default=str) if self.kube_config else None,
            "context": self.cluster_context,
            "verify_ssl": self.verify_ssl,
        }
        if self.mode == "default":
            material["kubeconfig_env"] = os.environ.get("KUBECONFIG", DEFAULT_KUBECONFIG)
        digest = hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:16]
        return f"{self.mode}:{digest}"

    def __hash__(self) -> int:
        return hash(self.key)

    def __repr__(self) -> str:
        parts = [f"mode={self.mode}"]
        if self.kube_config_path:
            parts.append(f"kube_config_path={self.kube_config_path!r}")
        if self.kube_config:
            parts.append("kube_config=<hidden>")
        if self.cluster_context:
            parts.append(f"cluster_context={self.cluster_context!r}")
        if not self.verify_ssl:
            parts.append("verify_ssl=False")
        if self.namespace:
            parts.append(f"namespace={self.namespace!r}")
        if self.source:
            parts.append(f"source={self.source!r}")
        return f"ClusterConfig({', '.join(parts)})"


def _kubeconfig_file(config: ClusterConfig) -> str:
    """The kubeconfig file to load: the config's own, else ``KUBECONFIG``'s, else the default."""
    if config.kube_config_path:
        return os.path.expanduser(config.kube_config_path)
    return os.environ.get("KUBECONFIG") or DEFAULT_KUBECONFIG


def _in_cluster_available() -> bool:
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and bool(os.environ.get("KUBERNETES_SERVICE_PORT"))


async def async_api_client(config: ClusterConfig) -> kubernetes_asyncio.client.ApiClient:
    """A new ``kubernetes_asyncio`` API client for ``config``, bound to the running event loop.

    Close it (``await client.close()``) in the same loop when done.
    """
    from kubernetes_asyncio import client

    return client.ApiClient(configuration=await async_configuration(config))


async def async_configuration(config: ClusterConfig) -> kubernetes_asyncio.client.Configuration:
    """A fresh ``kubernetes_asyncio`` ``Configuration`` for ``config`` (credentials loaded now).

    A kubeconfig user whose credential plugin (``exec``: ``aws eks get-token``, ``gke-gcloud-auth-
    plugin``) reports an expiry gets a refresh hook: the client re-runs the plugin shortly before
    the token expires, once for all concurrent requests. kubernetes_asyncio loads the token once
    and never refreshes it otherwise. In-cluster service-account tokens get the library's own hook.
    """
    keep_response_bodies_out_of_logs()
    from kubernetes_asyncio import client
    from kubernetes_asyncio import config as kconfig
    from kubernetes_asyncio.config.config_exception import ConfigException

    configuration = client.Configuration()
    mode = config.mode
    if mode == "default" and _in_cluster_available():
        with contextlib.suppress(ConfigException):  # else the kubeconfig, as the provider's hook does
            kconfig.load_incluster_config(client_configuration=configuration)
            mode = "loaded"
    loader: Any = None
    if mode == "in_cluster":
        kconfig.load_incluster_config(client_configuration=configuration)
    elif mode == "inline":
        loader = await kconfig.load_kube_config_from_dict(
            dict(config.kube_config or {}),
            context=config.cluster_context,
            client_configuration=configuration,
        )
    elif mode in ("file", "default"):
        loader = await kconfig.load_kube_config(
            config_file=_kubeconfig_file(config),
            context=config.cluster_context,
            client_configuration=configuration,
            persist_config=False,
        )
    if loader is not None and getattr(loader, "exec_plugin_expiry", None) is not None:
        configuration.refresh_api_key_hook = _ExecTokenRefresh(loader)
    if not config.verify_ssl:
        configuration.verify_ssl = False
    return configuration


class _ExecTokenRefresh:
    """Re-run a kubeconfig credential plugin once its token is about to expire.

    Installed as the configuration's ``refresh_api_key_hook``, which the client awaits before every
    request; the loader itself skips the plugin while the token is fresh, and the lock makes the
    requests that find it stale wait for one run of the plugin instead of each starting one.
    """

    def __init__(self, loader: Any) -> None:
        self._loader = loader
        self._lock = asyncio.Lock()

    async def __call__(self, configuration: Any) -> None:
        try:
            await within_plugin_limit(self._run_once(), PLUGIN_TIMEOUT)
        except TimeoutError:
            raise TransportError(
                f"refreshing a token: the kubeconfig credential plugin gave no credentials after "
                f"{PLUGIN_TIMEOUT:.0f} s and was stopped"
            ) from None
        token = getattr(self._loader, "token", None)
        if token:
            configuration.api_key["BearerToken"] = token

    async def _run_once(self) -> None:
        async with self._lock:
            await self._loader.load_from_exec_plugin()


async def within_plugin_limit(load: Awaitable[T], seconds: float) -> T:
    """Await ``load``, which may run kubeconfig credential plugins, for at most ``seconds``.

    On ``TimeoutError`` the plugins it started are stopped: kubernetes_asyncio waits for a plugin
    without a limit and, when its caller gives up, leaves the process running.
    """
    started = time.time()
    try:
        async with asyncio.timeout(seconds):
            return await load
    except TimeoutError:
        stop_plugins_started_since(started)
        raise


def stop_plugins_started_since(since: float) -> int:
    """Kill this process's credential-plugin children started at ``since`` or later; how many.

    A plugin is known by the variable its environment carries; the start times are compared with a
    second's slack (process start times are coarse). Only this process's own children are looked
    at, and a plugin that has already exited is skipped.
    """
    stopped = 0
    for child in psutil.Process().children():
        try:
            if child.create_time() < since - 1 or _PLUGIN_MARKER not in child.environ():
                continue
            # What the plugin started goes with it (a shell script's commands, a CLI's helpers):
            # stopped first, it starts nothing more while they are killed.
            child.suspend()
            for process in [*child.children(recursive=True), child]:
                with contextlib.suppress(psutil.Error):
                    process.kill()
            stopped += 1
        except psutil.Error:
            continue
    if stopped:
        log.warning("stopped %d kubeconfig credential plugin(s) that gave no credentials in time", stopped)
    return stopped
