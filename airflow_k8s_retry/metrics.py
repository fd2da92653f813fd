"""Verdict metrics, sent through Airflow's own metrics layer.

Platform teams watch metrics, not task logs. Every verdict this package acts on becomes a counter
named after its outcome and reason code; relaunches are counted; the trigger times how long it
took to reach a verdict once the deciding signal was seen, and how long a grace wait lasted; the
triggerer reports its shared watch feeds as gauges. Nothing here picks a backend: the metrics go
to ``airflow.sdk.observability.stats``, so they reach StatsD, Datadog or OpenTelemetry exactly as
the deployment's ``[metrics]`` section says, with Airflow's prefix, allow/block lists and
name handlers applied. Tags (``dag_id``, ``task_id``, ``namespace``) reach the backends that
carry tags (Datadog, OpenTelemetry, StatsD with ``statsd_influxdb_enabled``); plain StatsD drops
them. ``docs/metrics.md`` lists every name.

A metric must never break a task: every emission is guarded and failures are logged at debug
level. Airflow loads only when the first metric is sent, never at import.

Example::

    >>> verdict_metric("retry", "image.not_found")
    'k8s_retry.verdict.retry.image__not_found'
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import socket
from collections.abc import Iterable, Mapping
from dataclasses import astuple, dataclass
from typing import TYPE_CHECKING, Any

from airflow_k8s_retry.classification import RULES, Outcome, Reason, rule_grace
from airflow_k8s_retry.classification.policy import DEFAULT_POLICY

if TYPE_CHECKING:
    from airflow_k8s_retry.classification.model import Verdict
    from airflow_k8s_retry.classification.policy import FailurePolicy
    from airflow_k8s_retry.kube.hub import FeedStats, WatchHub

log = logging.getLogger(__name__)

PREFIX = "k8s_retry"
#: Counter, one per verdict acted on: ``k8s_retry.verdict.<outcome>.<reason>``.
VERDICT = f"{PREFIX}.verdict"
#: Counter: a fresh pod started inside the same try after infrastructure took the pod away.
RELAUNCHES = f"{PREFIX}.relaunches"
#: Timer (ms): from the deciding signal first seen (or its grace running out) to the verdict leaving
#: the trigger.
DETECTION_LATENCY = f"{PREFIX}.detection_latency"
#: Timer (ms): how long a signal with a grace was watched before its verdict became final.
GRACE_WAIT = f"{PREFIX}.grace_wait"
#: Gauge: shared LIST+WATCH feeds running in this triggerer (pods and Events).
FEEDS = f"{PREFIX}.triggerer.feeds"
#: Gauge: triggers following a pod through those feeds.
SUBSCRIPTIONS = f"{PREFIX}.triggerer.subscriptions"
#: Gauge: watches the running feeds have re-opened since they started.
WATCH_RECONNECTS = f"{PREFIX}.triggerer.watch_reconnects"
#: Gauge: running feeds that fell back to polling because RBAC forbids watching or listing.
POLLING_FEEDS = f"{PREFIX}.triggerer.polling_feeds"

#: Seconds between gauge refreshes while a triggerer has feeds.
GAUGE_INTERVAL = 30.0

_SEGMENT_INVALID = re.compile(r"[^A-Za-z0-9_-]")
#: The process (pid) in which Airflow's metrics module was last initialized from here.
_initialized: dict[str, int] = {}
_samplers: set[asyncio.Task[None]] = set()


def metric_segment(value: str) -> str:
    """``value`` as one segment of a metric name.

    Airflow's names allow ASCII letters, digits, ``_``, ``-``, ``.`` and ``/``, and ``.`` separates
    the hierarchy levels StatsD and Graphite build on. A reason code such as ``image.not_found``
    is one level, so its dot becomes ``__``: the same spelling Airflow itself uses when it puts a
    dotted value (a task id inside a task group) into a metric name. Anything else outside
    ``[A-Za-z0-9_-]`` becomes ``_``.
    """
    return _SEGMENT_INVALID.sub("_", value.replace(".", "__"))


def verdict_metric(outcome: str, reason: str) -> str:
    """The counter name for one verdict: ``k8s_retry.verdict.<outcome>.<reason>``."""
    return f"{VERDICT}.{metric_segment(outcome)}.{metric_segment(reason)}"


def default_verdict_metrics() -> dict[str, tuple[str, str]]:
    """Every verdict counter the default rules can send: name -> (outcome, reason code).

    A relaunch past its budget is a retry; an exit code can also skip or fail (``skip_on_exit_code``,
    ``fail_on_exit_codes``); the API's refusal at create retries or fails by status; the trigger's
    execution timeout retries. A ``FailurePolicy`` that changes an outcome sends the same pattern
    with that outcome.
    """
    pairs: set[tuple[Outcome, Reason]] = {
        (Outcome.RETRY, Reason.API_REJECTED),
        (Outcome.FAIL, Reason.API_REJECTED),
        (Outcome.RETRY, Reason.EXECUTION_TIMEOUT),
    }
    for rule in RULES:
        if not rule.outcome.is_final:
            continue
        pairs.add((rule.outcome, rule.reason))
        if rule.outcome is Outcome.RELAUNCH:
            pairs.add((Outcome.RETRY, rule.reason))
        if rule.reason is Reason.CONTAINER_EXIT_CODE:
            pairs |= {(Outcome.SKIP, rule.reason), (Outcome.FAIL, rule.reason)}
    return {
        verdict_metric(o.value, r.value): (o.value, r.value)
        for o, r in sorted(pairs, key=lambda p: (p[1].value, p[0].value))
    }


def _stats() -> Any:
    """Airflow's metrics module, initialized from ``[metrics]`` once in this process.

    The task runner and the triggerer initialize it too; ``airflow dags test`` runs tasks and
    triggers in its own process, where nothing else may have, so this does it once per process
    (again after a fork) with the factory Airflow's own processes use.
    """
    from airflow.sdk.observability import stats

    if _initialized.get("pid") != os.getpid():
        from airflow.sdk.configuration import conf
        from airflow.sdk.observability.metrics import stats_utils

        stats.initialize(
            factory=stats_utils.get_stats_factory(),
            export_legacy_names=conf.getboolean("metrics", "legacy_names_on", fallback=True),
        )
        _initialized["pid"] = os.getpid()
    return stats


def _tags(dag_id: str | None, task_id: str | None, namespace: str | None) -> dict[str, str]:
    tags = {"dag_id": dag_id, "task_id": task_id, "namespace": namespace}
    return {k: str(v) for k, v in tags.items() if v}


def _guarded(what: str, emit: Any, *args: Any, **kwargs: Any) -> None:
    try:
        emit(*args, **kwargs)
    except Exception as exc:  # a metric must never fail a task or a trigger
        log.debug("metric %s not sent: %s: %s", what, type(exc).__name__, exc)


# -- the operator and the sensor (worker) ------------------------------------------------------


def count_verdict(
    verdict: Verdict, *, dag_id: str | None, task_id: str | None, namespace: str | None
) -> None:
    """Count a verdict a task acted on (and a relaunch, when that is what it was)."""
    tags = _tags(dag_id, task_id, namespace)
    name = verdict_metric(verdict.outcome.value, verdict.reason.value)
    _guarded(name, lambda: _stats().incr(name, tags=tags))
    if verdict.outcome.value == "relaunch":
        _guarded(RELAUNCHES, lambda: _stats().incr(RELAUNCHES, tags={**tags, "reason": verdict.reason.value}))


def count_task_verdict(verdict: Verdict, context: Mapping[str, Any], namespace: str | None) -> None:
    """:func:`count_verdict` with the dag and task ids read from a task's context."""
    ti = context.get("ti")
    count_verdict(
        verdict,
        dag_id=getattr(ti, "dag_id", None),
        task_id=getattr(ti, "task_id", None),
        namespace=namespace,
    )


# -- the trigger (triggerer) -------------------------------------------------------------------


@dataclass(frozen=True)
class VerdictTiming:
    """How long a final verdict took: both in seconds, ``None`` where they do not apply."""

    detection_latency: float | None
    grace_wait: float | None


def verdict_timing(verdict: Verdict, *, now: float, policy: FailurePolicy | None) -> VerdictTiming:
    """Time a final verdict from its own history (pure; ``now`` on the trigger's clock).

    The deciding signal is the newest first-seen entry of the verdict's history: a final rule
    records its signal when it first sees it, and an earlier signal cannot be the one that just
    decided. Without a grace, the latency runs from that sighting; with one, from when the grace
    ran out, and the grace wait is the whole time since the sighting. Verdicts that no rule of the
    table produced (a timeout, an API refusal) and stamped verdicts (no history) get no timing.
    """
    seen = verdict.history.first_seen
    rule = next((r for r in RULES if r.name == verdict.rule), None)
    if not seen or rule is None or not verdict.outcome.is_final:
        return VerdictTiming(None, None)
    signal_at = max(seen.values())
    grace = rule_grace(rule, policy if policy is not None else DEFAULT_POLICY) or 0.0
    if grace > 0:
        waited = max(0.0, now - signal_at)
        return VerdictTiming(max(0.0, now - (signal_at + grace)), waited)
    return VerdictTiming(max(0.0, now - signal_at), None)


def time_trigger_verdict(
    verdict: Verdict,
    now: float,
    policy: FailurePolicy | None,
    identity: Mapping[str, Any] | None,
    namespace: str,
) -> None:
    """Send the detection-latency and grace-wait timers of a verdict the trigger emits."""
    ident = identity or {}
    tags = _tags(ident.get("dag_id"), ident.get("task_id"), namespace)
    try:
        timing = verdict_timing(verdict, now=now, policy=policy)
    except Exception as exc:
        log.debug("verdict timing failed: %s", exc)
        return
    tagged = {**tags, "reason": verdict.reason.value}
    for name, seconds in ((DETECTION_LATENCY, timing.detection_latency), (GRACE_WAIT, timing.grace_wait)):
        if seconds is not None:
            _guarded(name, lambda n=name, ms=seconds * 1000.0: _stats().timing(n, ms, tags=tagged))


# -- the triggerer's shared feeds --------------------------------------------------------------


@dataclass(frozen=True)
class FeedGauges:
    feeds: int
    subscriptions: int
    watch_reconnects: int
    polling_feeds: int


def feed_gauges(feeds: Iterable[FeedStats]) -> FeedGauges:
    """Sum a hub's feed statistics into the gauge values (pure).

    Subscriptions are counted on the pod feeds (each trigger has one there; its Events feed
    subscription is the same trigger). A feed's first watch is not a reconnect.
    """
    items = list(feeds)
    return FeedGauges(
        feeds=len(items),
        subscriptions=sum(f.subscribers for f in items if f.kind == "pods"),
        watch_reconnects=sum(max(0, f.counts.get("watch", 0) - 1) for f in items),
        polling_feeds=sum(1 for f in items if f.mode != "watch"),
    )


def send_feed_gauges(hub: WatchHub) -> None:
    """Send the gauges of ``hub`` (the triggerer's event loop) now."""
    try:
        values = feed_gauges(hub.stats())
    except Exception as exc:
        log.debug("feed gauges not computed: %s", exc)
        return
    tags = {"hostname": socket.gethostname()}
    names = (FEEDS, SUBSCRIPTIONS, WATCH_RECONNECTS, POLLING_FEEDS)
    for name, value in zip(names, astuple(values), strict=True):
        _guarded(name, lambda n=name, v=value: _stats().gauge(n, v, tags=tags))


def follow_feeds(hub: WatchHub) -> None:
    """Send the gauges now, and every :data:`GAUGE_INTERVAL` seconds while ``hub`` has feeds.

    Call it from the triggerer's event loop whenever a subscription starts or ends; one refresh
    task runs per loop at a time, and it stops once the last feed has stopped.
    """
    send_feed_gauges(hub)
    loop = asyncio.get_running_loop()
    if any(t.get_loop() is loop and not t.done() for t in _samplers):
        return

    async def refresh() -> None:
        while True:
            await asyncio.sleep(GAUGE_INTERVAL)
            send_feed_gauges(hub)
            if not hub.stats():
                return

    task = loop.create_task(refresh(), name="airflow-k8s-retry feed gauges")
    _samplers.add(task)
    task.add_done_callback(_samplers.discard)
