"""The classifier's stable codes: what to do with a pod (``Outcome``) and why (``Reason``).

Their values are public (XCom, trigger events, pod annotations, metrics labels); everything else in
the classifier's vocabulary (``model``) and its documentation (``reasons``) builds on them.
"""

from __future__ import annotations

from enum import StrEnum


class Outcome(StrEnum):
    """What the caller should do with a pod."""

    WAIT = "wait"
    SUCCEED = "succeed"
    RETRY = "retry"
    FAIL = "fail"
    RELAUNCH = "relaunch"
    SKIP = "skip"

    @property
    def is_final(self) -> bool:
        """True when the pod's business is over and it can be cleaned up."""
        return self is not Outcome.WAIT


FAILURE_OUTCOMES = frozenset({Outcome.RETRY, Outcome.FAIL})


class Reason(StrEnum):
    """Stable reason codes. Values are part of the public contract: never rename one."""

    SUCCEEDED = "pod.succeeded"
    RUNNING = "pod.running"
    RESIZE_INFEASIBLE = "pod.resize_infeasible"
    STATUS_BEHIND_SPEC = "pod.status_behind_spec"
    STARTING = "pod.starting"
    STARTUP_TIMEOUT = "startup.timeout"
    UNSCHEDULABLE = "schedule.unschedulable"
    SCHEDULE_TIMEOUT = "schedule.timeout"
    SCHEDULE_GATED = "schedule.gated"
    SCHEDULE_QUEUE_TIMEOUT = "schedule.queue_timeout"
    IMAGE_INVALID_NAME = "image.invalid_name"
    IMAGE_NEVER_PULL = "image.never_pull"
    IMAGE_NOT_FOUND = "image.not_found"
    IMAGE_UNAUTHORIZED = "image.unauthorized"
    IMAGE_RATE_LIMITED = "image.rate_limited"
    IMAGE_REGISTRY_UNAVAILABLE = "image.registry_unavailable"
    IMAGE_TLS_ERROR = "image.tls_error"
    IMAGE_WRONG_PLATFORM = "image.wrong_platform"
    IMAGE_SHORT_NAME = "image.short_name"
    IMAGE_POLICY_REFUSED = "image.policy_refused"
    IMAGE_PULL_BACKOFF = "image.pull_backoff"
    CONFIG_MISSING_SECRET = "config.missing_secret"
    CONFIG_MISSING_CONFIGMAP = "config.missing_configmap"
    CONFIG_ERROR = "config.error"
    CONFIG_SPEC_CONFLICT = "config.spec_conflict"
    CONTAINER_CREATE_ERROR = "container.create_error"
    VOLUME_MOUNT_FAILED = "volume.mount_failed"
    NODE_DISRUPTION = "node.disruption"
    NODE_LOST = "node.lost"
    CONTAINER_OOM = "container.oom"
    CONTAINER_EXIT_CODE = "container.exit_code"
    CONTAINER_STORAGE_LIMIT = "container.storage_limit"
    DEADLINE_EXCEEDED = "pod.deadline_exceeded"
    DELETED_EXTERNALLY = "pod.deleted_externally"
    POD_FAILED = "pod.failed"
    EXECUTION_TIMEOUT = "execution.timeout"
    API_REJECTED = "api.rejected"
    API_QUOTA_EXCEEDED = "api.quota_exceeded"
    API_UNAUTHORIZED = "api.unauthorized"
    API_CONFLICT = "api.conflict"
    API_UNAVAILABLE = "api.unavailable"
    API_TLS_ERROR = "api.tls_error"
    UNKNOWN = "pod.unknown"
