"""``classify``: one observation of a pod in, one verdict out.

This is a pure function: no I/O, no clock, no global state. The caller passes the time (``now``,
epoch seconds on its own clock) and the ``History`` returned by the previous call, so grace timers
run on the caller's clock, start when a signal is first seen and survive restarts, and the
strongest image-pull cause seen so far is never forgotten when kubelet messages decay.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from airflow_k8s_retry.classification import keys
from airflow_k8s_retry.classification.matchers import Fact
from airflow_k8s_retry.classification.model import History, Outcome, Reason, Verdict
from airflow_k8s_retry.classification.observation import Observation, observe
from airflow_k8s_retry.classification.policy import DEFAULT_POLICY, FailurePolicy, exit_codes
from airflow_k8s_retry.classification.rules import RULES, Rule
from airflow_k8s_retry.classification.wording import describe


def classify(
    pod: Mapping[str, Any] | None,
    events: Sequence[Mapping[str, Any]] | Mapping[str, Any] = (),
    history: History | None = None,
    *,
    now: float,
    policy: FailurePolicy | None = None,
    relaunches: int = 0,
    logs: Mapping[str, str] | None = None,
) -> Verdict:
    """Classify one observation of a pod.

    :param pod: the pod as the API returns it as JSON (camelCase keys), or ``None`` when the pod
        no longer exists (404 or a watch ``DELETED`` event).
    :param events: the pod's core/v1 Events as JSON (a list, or an EventList with ``items``).
    :param history: the ``history`` of the previous verdict for this pod (``None`` the first time).
    :param now: the current time, epoch seconds, on the caller's clock.
    :param policy: the DAG author's changes to the default rules.
    :param relaunches: fresh pods already started in this try after disruptions.
    :param logs: the last lines of a container's log, by container name, where they were read (a
        failed container's log may say why it could not start: ``exec format error``).
    :return: the verdict of the first rule in ``RULES`` that matches; its ``history`` is what to
        pass to the next call.

    Example:
        >>> pod = {"metadata": {"name": "p"}, "status": {"phase": "Running"}}
        >>> v = classify(pod, now=1000.0)
        >>> (v.outcome.value, v.reason.value, v.deadline)
        ('wait', 'pod.running', 1600.0)
    """
    obs = _observe(pod, events, history, now, logs)
    policy = policy if policy is not None else DEFAULT_POLICY
    updated = obs.history
    if obs.exists and obs.phase == "Pending":
        updated = updated.seen(keys.POD_PENDING, float(now))
    for rule in RULES:
        fact = rule.match(obs)
        if fact is not None:
            return decide(rule, fact, updated, now=float(now), policy=policy, relaunches=relaunches)
    raise AssertionError("the last rule of RULES matches everything")  # pragma: no cover


@dataclass(frozen=True)
class RuleCheck:
    """One rule the classifier considered, and the fact it found (``None``: it did not match)."""

    rule: Rule
    fact: Fact | None

    @property
    def matched(self) -> bool:
        return self.fact is not None


def trace(
    pod: Mapping[str, Any] | None,
    events: Sequence[Mapping[str, Any]] | Mapping[str, Any] = (),
    history: History | None = None,
    *,
    now: float,
    logs: Mapping[str, str] | None = None,
) -> tuple[RuleCheck, ...]:
    """Every rule ``classify`` considers for this observation, in order, ending with the match.

    Example:
        >>> checks = trace({"metadata": {"name": "p"}, "status": {"phase": "Running"}}, now=0.0)
        >>> [c.rule.name for c in checks if c.matched]
        ['running']
    """
    obs = _observe(pod, events, history, now, logs)
    checks: list[RuleCheck] = []
    for rule in RULES:
        checks.append(RuleCheck(rule, rule.match(obs)))
        if checks[-1].matched:
            break
    return tuple(checks)


def _observe(
    pod: Mapping[str, Any] | None,
    events: object,
    history: History | None,
    now: float,
    logs: Mapping[str, str] | None = None,
) -> Observation:
    if isinstance(now, bool) or not isinstance(now, int | float) or not math.isfinite(now):
        raise ValueError(f"classify(now=...) must be finite epoch seconds, got {now!r}")
    if isinstance(events, History):
        raise TypeError("classify(): a History was passed as events; pass it as history=...")
    return observe(pod, events, history if history is not None else History(), float(now), logs)


def rule_grace(rule: Rule, policy: FailurePolicy) -> float | None:
    """The grace ``rule`` gets under ``policy`` (seconds), or ``None`` when it acts at once."""
    if rule.grace is None:
        return None
    if rule.outcome is not Outcome.WAIT:
        override = policy.grace_for(rule.reason)
        if override is not None:
            return override
    return rule.grace.resolve(policy)


def decide(
    rule: Rule, match: Fact, history: History, *, now: float, policy: FailurePolicy, relaunches: int
) -> Verdict:
    """Turn a rule's fact into a verdict: wording, grace, policy overrides, exit-code lists, budget."""
    evidence = tuple(e if e.seen_at else replace(e, seen_at=now) for e in match.evidence)
    grace = rule_grace(rule, policy)
    message = describe(rule.reason, match)
    if rule.outcome is Outcome.WAIT:
        period = grace if grace is not None else policy.running_recheck
        return Verdict(
            Outcome.WAIT,
            rule.waiting_reason or rule.reason,
            f"{message}; next re-check in {duration(period)}",
            rule.name,
            deadline=now + period,
            evidence=evidence,
            history=history,
        )
    outcome = policy.outcome_for(rule.reason) or rule.outcome
    # Final signals are remembered too: a pod that vanishes right after is explained by them.
    history = history.seen(match.key, now)
    if grace is not None and grace > 0:
        for key in match.extension_keys:
            history = history.seen(key, now)
        start = history.since(match.key)
        assert start is not None
        deadline = start + grace
        if rule.extension is not None and match.extension_keys:
            extra = rule.extension.resolve(policy)
            latest = max(history.since(k) or start for k in match.extension_keys)
            deadline = min(max(deadline, latest + extra), start + grace + extra)
        if now < deadline:
            waited = f"seen for {duration(now - start)}" if now > start else "first seen now"
            return Verdict(
                Outcome.WAIT,
                rule.waiting_reason or rule.reason,
                f"{message}; {waited}, will {outcome.value} in {duration(deadline - now)} unless it clears",
                rule.name,
                deadline=deadline,
                evidence=evidence,
                history=history,
            )
        message += (
            f" (still so after {duration(now - start)}, past its grace of {duration(deadline - start)})"
        )
    outcome, message = _exit_code_lists(rule, match, outcome, message, policy)
    outcome, message = _relaunch_budget(outcome, message, policy, relaunches)
    return Verdict(outcome, rule.reason, message, rule.name, evidence=evidence, history=history)


def _exit_code_lists(
    rule: Rule, match: Fact, outcome: Outcome, message: str, policy: FailurePolicy
) -> tuple[Outcome, str]:
    """Apply ``skip_on_exit_codes`` / ``fail_on_exit_codes`` to an exit-code verdict, and a 0 in
    ``skip_on_exit_codes`` to a success (the base container exited 0)."""
    skip = exit_codes(policy.skip_on_exit_codes, success=True)
    if outcome is Outcome.SUCCEED and 0 in skip:
        return Outcome.SKIP, f"{message}; exit code 0 is in skip_on_exit_codes, so the task is skipped"
    code = match.exit_code
    if rule.reason is not Reason.CONTAINER_EXIT_CODE or code is None:
        return outcome, message
    if code in skip:
        return Outcome.SKIP, f"{message}; exit code {code} is in skip_on_exit_codes, so the task is skipped"
    if code in exit_codes(policy.fail_on_exit_codes):
        return (
            Outcome.FAIL,
            f"{message}; exit code {code} is in fail_on_exit_codes, so the task fails without retrying",
        )
    return outcome, message


def _relaunch_budget(
    outcome: Outcome, message: str, policy: FailurePolicy, relaunches: int
) -> tuple[Outcome, str]:
    """A relaunch within the budget says which one it is; past the budget it costs a try."""
    if outcome is not Outcome.RELAUNCH:
        return outcome, message
    budget = policy.relaunch_budget
    if relaunches >= budget:
        return (
            Outcome.RETRY,
            f"{message}; the relaunch budget is spent ({relaunches} of {budget} relaunches used), "
            "so this costs a try",
        )
    return (
        outcome,
        f"{message}; a fresh pod will be started in the same try (relaunch {relaunches + 1} of {budget})",
    )


def duration(seconds: float) -> str:
    """Seconds as a short human duration: ``90s``, ``15m``, ``1h05m``."""
    total = max(0, round(seconds))
    if total < 120:
        return f"{total}s"
    minutes, secs = divmod(total, 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s" if secs else f"{minutes}m"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def classify_seen_for(
    pod: Mapping[str, Any] | None,
    events: Sequence[Mapping[str, Any]] | Mapping[str, Any] = (),
    *,
    elapsed: float,
    now: float,
    policy: FailurePolicy | None = None,
    relaunches: int = 0,
    logs: Mapping[str, str] | None = None,
) -> Verdict:
    """Classify one observation as if every signal in it had been seen ``elapsed`` seconds ago.

    This answers "what would the verdict be if the pod had looked like this for ten minutes?"
    without a history: used by ``airflow-k8s-retry explain --elapsed`` and the corpus tests.
    """
    if isinstance(elapsed, bool) or not isinstance(elapsed, int | float) or not math.isfinite(elapsed):
        raise ValueError(f"elapsed must be a finite number of seconds, got {elapsed!r}")
    if elapsed < 0:
        raise ValueError(f"elapsed must be >= 0 seconds, got {elapsed!r}")
    first = classify(pod, events, None, now=now, policy=policy, relaunches=relaunches, logs=logs)
    start = float(now) - float(elapsed)
    strongest = first.history.strongest
    backdated = History(
        first_seen={key: start for key in first.history.first_seen},
        strongest=replace(strongest, seen_at=start) if strongest is not None else None,
    )
    return classify(pod, events, backdated, now=now, policy=policy, relaunches=relaunches, logs=logs)
