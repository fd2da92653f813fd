"""The default classification rules: one ordered table, first match wins, catch-all last.

Each row says, in keyword columns: the rule's ``name``; the ``reason`` code it reports; the
``outcome`` once its grace is over; its ``grace`` (``Seconds(90)``, ``PolicyField("startup_timeout")``
or ``None`` to act at once); the matcher (``matchers.py`` and ``waiting.py``, whose docstring is the wording it
matches); and ``why`` the rule exists. Messages are worded per reason code in ``wording.py`` and
fix hints live in ``reasons.py``. The order is the precedence, read top to bottom:

1. the pod is gone or finished (success before anything else);
2. infrastructure took the pod away or refused it (relaunch: it was not the task's fault);
3. a container finished badly (OOM, start error, exit code) or the pod failed otherwise;
4. the kubelet has not caught up with a spec change (``observedGeneration``: a running pod waits, a
   pod whose work does not run is relaunched after 5 minutes), or a container cannot start (image,
   node image policy, configuration, crash loop, runtime errors);
5. the pod runs (perhaps with a refused resize), or its node stopped reporting (a re-check deadline,
   not a failure);
6. the pod is not placed or not started yet (scheduling gates, scheduling, volumes, sandbox, startup
   timeout);
7. anything else (a long timeout, never a hang).

Adding a failure mode is one matcher, one line here, one formatter branch and one corpus case.
``docs/classification.md`` shows this table; ``tests/unit/classification/test_docs_match_the_table.py``
checks every column of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Literal, Protocol

from airflow_k8s_retry.classification import matchers as m
from airflow_k8s_retry.classification import waiting as w
from airflow_k8s_retry.classification.matchers import Matcher
from airflow_k8s_retry.classification.model import Outcome, Reason

#: The policy fields a rule's grace may name (``PolicyField``).
TimeoutField = Literal[
    "startup_timeout", "schedule_timeout", "running_recheck", "scale_up_timeout", "queue_timeout"
]


class Timeouts(Protocol):
    """What a grace reads from a policy: ``FailurePolicy``, which validates itself against this
    table (so the table cannot import it)."""

    def timeout(self, name: TimeoutField) -> float: ...


@dataclass(frozen=True)
class Seconds:
    """A fixed grace, in seconds on the triggerer's clock."""

    value: float

    def resolve(self, policy: Timeouts) -> float:
        return float(self.value)

    def __str__(self) -> str:
        minutes, secs = divmod(round(self.value), 60)
        hours, odd = divmod(minutes, 60)
        if hours and not odd and not secs:
            return f"{hours} h"
        return f"{minutes} min" if minutes and not secs else f"{round(self.value)} s"


@dataclass(frozen=True)
class PolicyField:
    """A grace read from a ``FailurePolicy`` field (a DAG author's timeout)."""

    name: TimeoutField

    def resolve(self, policy: Timeouts) -> float:
        return policy.timeout(self.name)

    def __str__(self) -> str:
        return f"`{self.name}`"


Grace = Seconds | PolicyField | None


@dataclass(frozen=True)
class Rule:
    """One row of the classification table.

    A rule with a grace waits that long from when its signal was first seen before ``outcome``
    applies; a rule whose ``outcome`` is ``WAIT`` always waits, with ``grace`` as its re-check
    period. ``waiting_reason`` is reported while the grace runs when it differs from ``reason``;
    ``extension`` is extra grace while a fresh extension signal exists (cluster-autoscaler).
    """

    name: str
    reason: Reason
    outcome: Outcome
    grace: Grace
    match: Matcher
    why: str
    waiting_reason: Reason | None = None
    extension: PolicyField | None = None

    @property
    def signal(self) -> str:
        """What the matcher looks for, in the wording it matches (its docstring, on one line)."""
        return " ".join((self.match.__doc__ or self.name).split())


# fmt: off
R = Reason
RETRY, FAIL, RELAUNCH, WAIT, SUCCEED = Outcome.RETRY, Outcome.FAIL, Outcome.RELAUNCH, Outcome.WAIT, Outcome.SUCCEED

RULES: tuple[Rule, ...] = (
    # --- gone or finished ---
    Rule(name="gone_after_disruption",      reason=R.NODE_DISRUPTION,            outcome=RELAUNCH, grace=None,                            match=m.gone_after_disruption,      why="a pod that vanishes after a DisruptionTarget, an eviction or an admission rejection was taken by the cluster"),
    Rule(name="gone_after_node_lost",       reason=R.NODE_LOST,                  outcome=RELAUNCH, grace=None,                            match=m.gone_after_node_lost,       why="a pod that vanishes after its node stopped reporting was garbage-collected with the node"),
    Rule(name="pod_gone",                   reason=R.DELETED_EXTERNALLY,         outcome=RETRY,    grace=None,                            match=m.pod_gone,                   why="a pod that vanished before finishing was deleted by someone else; the try cannot complete"),
    Rule(name="succeeded",                  reason=R.SUCCEEDED,                  outcome=SUCCEED,  grace=None,                            match=m.succeeded,                  why="phase Succeeded is final, whatever else the status says"),
    # --- infrastructure took the pod away or refused it ---
    Rule(name="storage_limit",              reason=R.CONTAINER_STORAGE_LIMIT,    outcome=RETRY,    grace=None,                            match=m.storage_limit,              why="an eviction for the pod's own ephemeral-storage limit would repeat on any node: not a disruption"),
    Rule(name="disruption_target",          reason=R.NODE_DISRUPTION,            outcome=RELAUNCH, grace=None,                            match=m.disruption_target,          why="the cluster is taking the pod away (preemption, eviction, taint, GC, kubelet): not the task's fault"),
    Rule(name="node_lost",                  reason=R.NODE_LOST,                  outcome=RELAUNCH, grace=None,                            match=m.node_lost,                  why="the node controller gave up on the pod's node"),
    Rule(name="node_rejected",              reason=R.NODE_DISRUPTION,            outcome=RELAUNCH, grace=None,                            match=m.node_rejected,              why="the kubelet evicted or shut down the pod (node pressure, node shutdown)"),
    Rule(name="admission_rejected",         reason=R.NODE_DISRUPTION,            outcome=RELAUNCH, grace=None,                            match=m.admission_rejected,         why="the kubelet refused the pod before any container started (its view of labels, taints, ports or capacity differs from the scheduler's); a fresh pod is placed again"),
    Rule(name="container_status_unknown",   reason=R.NODE_LOST,                  outcome=RELAUNCH, grace=None,                            match=m.container_status_unknown,   why="the kubelet lost the container (exit 137 here is not an OOM kill)"),
    # --- a container finished badly, or the pod failed ---
    Rule(name="deadline_exceeded",          reason=R.DEADLINE_EXCEEDED,          outcome=RETRY,    grace=None,                            match=m.deadline_exceeded,          why="activeDeadlineSeconds ended the pod"),
    Rule(name="deleted_while_running",      reason=R.DELETED_EXTERNALLY,         outcome=RETRY,    grace=None,                            match=m.deleted_while_running,      why="deletionTimestamp on an unfinished pod without DisruptionTarget: someone deleted it"),
    Rule(name="exec_format_error",          reason=R.IMAGE_WRONG_PLATFORM,       outcome=FAIL,     grace=None,                            match=m.exec_format_error,          why="the runtime cannot execute the entrypoint: the image is built for another architecture (or its entrypoint is no binary at all), which no retry on this node's architecture changes (see 'Wrong platform')"),
    Rule(name="oom_killed",                 reason=R.CONTAINER_OOM,              outcome=RETRY,    grace=None,                            match=m.oom_killed,                 why="only the reason OOMKilled proves an out-of-memory kill"),
    Rule(name="start_failure",              reason=R.CONTAINER_CREATE_ERROR,     outcome=RETRY,    grace=None,                            match=m.start_failure,              why="the runtime could not start the command (StartError, ContainerCannotRun)"),
    Rule(name="exit_code",                  reason=R.CONTAINER_EXIT_CODE,        outcome=RETRY,    grace=None,                            match=m.exit_code,                  why="a container that will not be restarted exited non-zero; exit-code lists may skip or fail it"),
    Rule(name="main_containers_done",       reason=R.SUCCEEDED,                  outcome=SUCCEED,  grace=None,                            match=m.main_containers_done,       why="under restartPolicy Never the work is done once every main container exited 0, even while the XCom sidecar waits to be read"),
    Rule(name="pod_failed",                 reason=R.POD_FAILED,                 outcome=RETRY,    grace=None,                            match=m.pod_failed,                 why="phase Failed with no more specific explanation"),
    # --- the kubelet has not caught up, or a container cannot start ---
    Rule(name="status_behind_while_running", reason=R.STATUS_BEHIND_SPEC,       outcome=WAIT,     grace=PolicyField("running_recheck"),  match=w.status_behind_spec_while_running, why="a running pod whose kubelet has not reported on a spec change (an in-place resize) is still working, and its kubelet alive: a lag alone never ends the work; a lost node has its own evidence (phase Unknown, ContainerStatusUnknown, the node controller's taints and DisruptionTarget)"),
    Rule(name="status_behind_spec",         reason=R.NODE_LOST,                  outcome=RELAUNCH, grace=Seconds(300),                    match=w.status_behind_spec,         why="what the kubelet reports predates a spec change (a resize, a new image): wait for it to catch up, seconds on a healthy node; a kubelet 5 minutes behind has stopped acting on the pod", waiting_reason=R.STATUS_BEHIND_SPEC),
    Rule(name="invalid_image_name",         reason=R.IMAGE_INVALID_NAME,         outcome=FAIL,     grace=None,                            match=w.invalid_image_name,         why="a malformed image reference never becomes valid"),
    Rule(name="image_never_pull",           reason=R.IMAGE_NEVER_PULL,           outcome=FAIL,     grace=None,                            match=w.image_never_pull,           why="imagePullPolicy Never with a missing image is a spec error"),
    Rule(name="image_policy_refused",       reason=R.IMAGE_POLICY_REFUSED,       outcome=FAIL,     grace=None,                            match=w.image_policy_refused,       why="the node's signature policy judges the image, not the registry: every node with the same policy refuses it, and only a signed image (or a changed policy) passes"),
    Rule(name="image_wrong_platform",       reason=R.IMAGE_WRONG_PLATFORM,       outcome=FAIL,     grace=None,                            match=w.image_wrong_platform,       why="the registry's answer is final: the image has no variant for this OS/architecture, and a retry lands on a node the scheduler picks without knowing it (see 'Wrong platform')"),
    Rule(name="image_short_name",           reason=R.IMAGE_SHORT_NAME,           outcome=FAIL,     grace=None,                            match=w.image_short_name,           why="the node's registries.conf decides, not the registry: the same name fails on every node alike, like an invalid name"),
    Rule(name="image_not_found",            reason=R.IMAGE_NOT_FOUND,            outcome=RETRY,    grace=Seconds(90),                     match=w.image_not_found,            why="confirm across observations: a just-pushed tag or a registry hiccup can look missing"),
    Rule(name="image_unauthorized",         reason=R.IMAGE_UNAUTHORIZED,         outcome=RETRY,    grace=Seconds(120),                    match=w.image_unauthorized,         why="pull secrets may still be propagating, and throttled registries also answer denied"),
    Rule(name="image_rate_limited",         reason=R.IMAGE_RATE_LIMITED,         outcome=RETRY,    grace=Seconds(900),                    match=w.image_rate_limited,         why="the kubelet's back-off (up to 300 s between pulls) usually rides out a rate limit"),
    Rule(name="image_tls_error",            reason=R.IMAGE_TLS_ERROR,            outcome=RETRY,    grace=Seconds(120),                    match=w.image_tls_error,            why="a certificate or TLS set-up error does not pass by itself: a few kubelet pulls confirm it (a CA or certificate being rolled out), then a retry, which may land on a correctly set-up node"),
    Rule(name="image_registry_unavailable", reason=R.IMAGE_REGISTRY_UNAVAILABLE, outcome=RETRY,    grace=Seconds(900),                    match=w.image_registry_unavailable, why="registry outages and network errors are usually transient"),
    Rule(name="image_pull_backoff",         reason=R.IMAGE_PULL_BACKOFF,         outcome=RETRY,    grace=Seconds(300),                    match=w.image_pull_backoff,         why="only the generic back-off text and no earlier cause: give the kubelet a few pulls"),
    Rule(name="config_spec_conflict",       reason=R.CONFIG_SPEC_CONFLICT,       outcome=FAIL,     grace=None,                            match=w.config_spec_conflict,       why="the kubelet compares the container's security context with the user its image names: both are the same on every node and later, so the refusal never clears (a missing Secret can appear later: it waits)"),
    Rule(name="missing_secret",             reason=R.CONFIG_MISSING_SECRET,      outcome=RETRY,    grace=Seconds(60),                     match=w.missing_secret,             why="'failed to sync secret cache' is transient and a Secret may be created just after the pod"),
    Rule(name="missing_configmap",          reason=R.CONFIG_MISSING_CONFIGMAP,   outcome=RETRY,    grace=Seconds(60),                     match=w.missing_configmap,          why="as for Secrets: the ConfigMap may be created just after the pod"),
    Rule(name="config_error",               reason=R.CONFIG_ERROR,               outcome=RETRY,    grace=Seconds(60),                     match=w.config_error,               why="other CreateContainerConfigError may clear (a kubelet that has not listed Services yet, a subPath or env file another container creates): grace, then retry"),
    Rule(name="crash_loop_oom",             reason=R.CONTAINER_OOM,              outcome=RETRY,    grace=Seconds(180),                    match=w.crash_loop_oom,             why="a restarting container that keeps being OOM-killed"),
    Rule(name="crash_loop",                 reason=R.CONTAINER_EXIT_CODE,        outcome=RETRY,    grace=Seconds(180),                    match=w.crash_loop,                 why="a restarting container that keeps failing; give it a few restarts"),
    Rule(name="container_error",            reason=R.CONTAINER_CREATE_ERROR,     outcome=RETRY,    grace=Seconds(180),                    match=w.container_error,            why="CreateContainerError, RunContainerError, *HookError and any other waiting error may be transient"),
    # --- the pod runs, or its node stopped reporting ---
    Rule(name="resize_infeasible",          reason=R.RESIZE_INFEASIBLE,          outcome=WAIT,     grace=PolicyField("running_recheck"),  match=w.resize_infeasible,          why="a refused in-place resize leaves the pod running with its current resources: not a failure, but worth naming"),
    Rule(name="running",                    reason=R.RUNNING,                    outcome=WAIT,     grace=PolicyField("running_recheck"),  match=w.running,                    why="a running pod is healthy; the deadline is only a safety re-check"),
    Rule(name="phase_unknown",              reason=R.NODE_LOST,                  outcome=RELAUNCH, grace=Seconds(300),                    match=w.phase_unknown,              why="phase Unknown means the node stopped reporting; give it 5 minutes to come back"),
    # --- not placed or not started yet ---
    Rule(name="scheduling_gated",           reason=R.SCHEDULE_QUEUE_TIMEOUT,     outcome=RETRY,    grace=PolicyField("queue_timeout"),    match=w.scheduling_gated,           why="a gated pod is not unschedulable: nothing has tried to place it; it waits its turn in a queue (Kueue), and schedule_timeout starts once the last gate is lifted", waiting_reason=R.SCHEDULE_GATED),
    Rule(name="unschedulable",              reason=R.SCHEDULE_TIMEOUT,           outcome=RETRY,    grace=PolicyField("schedule_timeout"), match=w.unschedulable,              why="capacity may appear (finishing pods, a node being provisioned); each fresh sign of a node coming extends the wait, within a bound, until one says it failed", waiting_reason=R.UNSCHEDULABLE, extension=PolicyField("scale_up_timeout")),
    Rule(name="volume_mount_failed",        reason=R.VOLUME_MOUNT_FAILED,        outcome=RETRY,    grace=Seconds(300),                    match=w.volume_mount_failed,        why="attach and mount errors often clear when a volume detaches from its previous node"),
    Rule(name="sandbox_failed",             reason=R.CONTAINER_CREATE_ERROR,     outcome=RETRY,    grace=Seconds(180),                    match=w.sandbox_failed,             why="CNI and runtime hiccups usually clear; a new pod may land on a healthier node"),
    Rule(name="starting",                   reason=R.STARTUP_TIMEOUT,            outcome=RETRY,    grace=PolicyField("startup_timeout"),  match=w.pending,                    why="pending with no known problem is normal, but not forever", waiting_reason=R.STARTING),
    # --- anything else ---
    Rule(name="unrecognised",               reason=R.UNKNOWN,                    outcome=RETRY,    grace=PolicyField("startup_timeout"),  match=w.anything,                   why="catch-all: an unexpected state gets the startup timeout, never an endless wait"),
)
# fmt: on


@cache
def graceable_reasons() -> frozenset[Reason]:
    """Reason codes whose grace a ``FailurePolicy`` may set."""
    return frozenset(r.reason for r in RULES if r.grace is not None and r.outcome is not Outcome.WAIT)


@cache
def overridable_reasons() -> frozenset[Reason]:
    """Reason codes whose outcome a ``FailurePolicy`` may set."""
    return frozenset(r.reason for r in RULES if r.outcome not in (Outcome.WAIT, Outcome.SUCCEED))


def rule_named(name: str) -> Rule:
    for rule in RULES:
        if rule.name == name:
            return rule
    raise KeyError(f"no rule named {name!r}; rules: {', '.join(r.name for r in RULES)}")
