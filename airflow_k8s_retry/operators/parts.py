"""What the try's helpers (``try_pod``, ``endings``) read and write on the operator.

``RetryingPodOperator`` (``operators.pod``) calls them with itself; they name it by this protocol,
not by its class, so they depend on what they use and the operator's module is the only one that
imports the others. The cncf operator's own members are typed loosely (``Any``): its class is
untyped to mypy, and this package does not restate its types.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import logging

    from airflow_k8s_retry.classification.policy import FailurePolicy
    from airflow_k8s_retry.kube.logstream import LogPosition
    from airflow_k8s_retry.memory_growth import MemoryGrowth


class TryOperator(Protocol):
    """The operator of one try, as its helpers see it."""

    # This package's own state: the policy, the growth, what the trigger saw and where its log
    # streaming stopped, and the try's memory sizing (``try_pod.SizedTry``).
    failure_policy: FailurePolicy
    memory_growth: MemoryGrowth | None
    _seen: Mapping[str, Any] | None
    _log_position: LogPosition | None
    _memory_sized: Any

    # The cncf operator's arguments and helpers.
    task_id: str
    name: Any
    random_name_suffix: Any
    pod_template_file: Any
    pod_request_obj: Any
    base_container_name: Any
    kubernetes_conn_id: Any
    in_cluster: Any
    config_file: Any
    cluster_context: Any
    poll_interval: Any
    streaming_interval: Any
    on_kill_action: Any
    get_logs: Any
    container_logs: Any
    init_container_logs: Any
    container_name_log_prefix_enabled: Any
    log_formatter: Any
    do_xcom_push: Any
    multiple_outputs: Any
    callbacks: Any

    @property
    def log(self) -> logging.Logger: ...

    @property
    def hook(self) -> Any: ...

    @property
    def client(self) -> Any: ...

    @property
    def pod_manager(self) -> Any: ...

    def build_pod_request_obj(self, context: Any = None) -> Any: ...
