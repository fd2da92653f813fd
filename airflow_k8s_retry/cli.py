"""The ``airflow-k8s-retry`` command line: ``explain`` a pod's verdict, ``simulate`` a cluster.

``explain`` answers "what would the operator do with this pod, and why?" from files that
``kubectl get pod NAME -o json`` and ``kubectl get events --field-selector involvedObject.name=NAME
-o json`` produce, without a cluster or Airflow. ``simulate`` serves the Kubernetes API simulator
(the ``airflow-k8s-retry-testing`` distribution, installed by the ``[testing]`` extra). This module
stays import-light: the simulator loads only when ``simulate`` runs, and Airflow only when
``explain --dag-id`` reads its database.

``explain --dag-id D --task-id T`` reads every try of a task from Airflow's metadata database
(the deployment's ``airflow.cfg``), with each failed try's reason code, as the failures page does.

Example:
    $ airflow-k8s-retry explain pod.json --events events.json --elapsed 120
    $ airflow-k8s-retry explain pod.json --trace     # also every rule considered before the match
    $ airflow-k8s-retry explain pod.json --log base=base.log   # with the failed container's log tail
    $ airflow-k8s-retry explain --dag-id etl --task-id load   # every try of a task and its cause
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from airflow_k8s_retry.classification import (
    RULES,
    FailurePolicy,
    Outcome,
    PolicyError,
    RuleCheck,
    Verdict,
    classify,
    classify_seen_for,
    hint_for,
    rule_named,
    trace,
)
from airflow_k8s_retry.classification.classifier import duration
from airflow_k8s_retry.classification.retries import RetrySteps
from airflow_k8s_retry.live_pod import LivePodError, read_live_pod
from airflow_k8s_retry.live_pod import add_arguments as add_live_arguments

USAGE_ERROR = 2


class InputError(Exception):
    """An input file cannot be used; the message says which file and why, on one line."""


def _read_json(path: str, what: str) -> Any:
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read {what} file {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise InputError(f"{what} file {path} is not text (expected JSON)") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(
            f"{what} file {path} is not JSON ({exc.msg} at line {exc.lineno} column {exc.colno}); "
            f"save it with 'kubectl get ... -o json'"
        ) from None


def load_pod(path: str) -> Mapping[str, Any]:
    """Read one pod from ``path``: the JSON ``kubectl get pod NAME -o json`` prints."""
    data = _read_json(path, "pod")
    if not isinstance(data, Mapping):
        raise InputError(f"pod file {path} holds a JSON {type(data).__name__}, not a pod object")
    kind = data.get("kind")
    if kind in {"List", "PodList"} or "items" in data:
        raise InputError(f"pod file {path} holds a list; save one pod with 'kubectl get pod NAME -o json'")
    if kind is not None and kind != "Pod":
        raise InputError(f"pod file {path} holds a {kind}, not a Pod")
    if not isinstance(data.get("status"), Mapping) and not isinstance(data.get("spec"), Mapping):
        raise InputError(f"pod file {path} is not a pod: it has neither a 'status' nor a 'spec' object")
    return data


def load_events(path: str) -> list[Mapping[str, Any]]:
    """Read Events from ``path``: a JSON list of Events or an EventList (``{"items": [...]}``)."""
    data = _read_json(path, "events")
    items = data.get("items") if isinstance(data, Mapping) else data
    if not isinstance(items, list):
        raise InputError(f"events file {path} is neither a list of Events nor an EventList with 'items'")
    bad = [i for i, item in enumerate(items) if not isinstance(item, Mapping)]
    if bad:
        raise InputError(f"events file {path}: item {bad[0]} is not an Event object")
    return items


def load_logs(pod: Mapping[str, Any], specs: Sequence[str]) -> dict[str, str]:
    """Read ``explain --log [CONTAINER=]FILE`` arguments: each container's last log lines (without a
    container, the pod's first main container)."""
    logs: dict[str, str] = {}
    for spec in specs:
        container, sep, path = spec.partition("=")
        if not sep:
            container, path = _first_container(pod), spec
        if not container:
            raise InputError(f"--log {spec}: the pod names no container; give one as --log CONTAINER={path}")
        try:
            logs[container] = Path(path).read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            raise InputError(f"cannot read log file {path}: {exc.strerror or exc}") from None
    return logs


def _first_container(pod: Mapping[str, Any]) -> str:
    spec = pod.get("spec")
    containers = spec.get("containers") if isinstance(spec, Mapping) else None
    first = containers[0] if isinstance(containers, list) and containers else None
    return str(first.get("name") or "") if isinstance(first, Mapping) else ""


def load_policy(path: str) -> FailurePolicy:
    data = _read_json(path, "policy")
    try:
        return FailurePolicy.from_payload(data)
    except (PolicyError, TypeError) as exc:
        raise InputError(f"policy file {path}: {exc}") from None


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number of seconds >= 0")
    return value


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be >= 0")
    return value


#: What follows a retried try by default (``PodFailureRetryPolicy()``'s table).
DEFAULT_RETRY_STEPS = RetrySteps()

#: Characters of a rule's signal shown per line of ``--trace`` (``--json`` has them whole).
SIGNAL_WIDTH = 90


def explanation(
    verdict: Verdict, *, now: float, elapsed: float, checks: Sequence[RuleCheck] | None = None
) -> dict[str, Any]:
    """The JSON object ``explain --json`` prints; ``trace`` is there with ``--trace`` only."""
    rule = rule_named(verdict.rule)
    result: dict[str, Any] = {
        "outcome": verdict.outcome.value,
        "reason": verdict.reason.value,
        "message": verdict.message,
        "hint": hint_for(verdict.reason),
        "rule": verdict.rule,
        "rule_index": RULES.index(rule),
        "why": rule.why,
        "deadline_seconds": None if verdict.deadline is None else max(0.0, verdict.deadline - now),
        "elapsed_seconds": elapsed,
        "evidence": [
            {"reason": e.reason.value, "source": e.source, "container": e.container, "message": e.message}
            for e in verdict.evidence
        ],
    }
    if verdict.outcome is Outcome.RETRY:
        result["next_try"] = DEFAULT_RETRY_STEPS.step_for(verdict.reason.value).describe()
    if checks is not None:
        result["trace"] = [
            {
                "rule": c.rule.name,
                "matched": c.matched,
                "reason": c.rule.reason.value,
                "signal": c.rule.signal,
            }
            for c in checks
        ]
    return result


def render(
    verdict: Verdict,
    *,
    now: float,
    elapsed: float,
    pod: Mapping[str, Any],
    out: TextIO,
    checks: Sequence[RuleCheck] | None = None,
) -> None:
    """Print ``verdict`` for a person; with ``checks``, every rule considered up to the match."""
    meta = pod.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    namespace = meta.get("namespace") if isinstance(meta, Mapping) else None
    rule = rule_named(verdict.rule)
    title = f"{namespace}/{name}" if namespace and name else str(name or "(unnamed pod)")
    lines = [
        f"pod:      {title}",
        f"verdict:  {verdict.outcome.value.upper()}  {verdict.reason.value}",
        f"rule:     {verdict.rule} (rule {RULES.index(rule) + 1} of {len(RULES)}: {rule.why})",
        f"message:  {verdict.message}",
        f"hint:     {hint_for(verdict.reason)}",
    ]
    if verdict.outcome is Outcome.WAIT and verdict.deadline is not None:
        left = max(0.0, verdict.deadline - now)
        seen = f"signals counted as seen for {duration(elapsed)}" if elapsed else "signals counted as new"
        lines.append(f"deadline: in {duration(left)} ({seen}; use --elapsed to look later)")
    else:
        lines.append("deadline: none (final verdict)")
    if verdict.outcome is Outcome.RETRY:
        step = DEFAULT_RETRY_STEPS.step_for(verdict.reason.value).describe()
        lines.append(f"next try: {step} (PodFailureRetryPolicy's default, Airflow 3.3+)")
    if verdict.evidence:
        lines.append("evidence:")
        for e in verdict.evidence:
            where = f" {e.container}" if e.container else ""
            lines.append(f"  - [{e.source}{where}] {e.message}")
    if checks is not None:
        lines.extend(_trace_lines(checks))
    out.write("\n".join(lines) + "\n")


def _trace_lines(checks: Sequence[RuleCheck]) -> list[str]:
    skipped = len(checks) - 1
    lines = [
        f"trace:    {len(checks)} of {len(RULES)} rules considered, in order; "
        f"the first {skipped} did not match, then rule {len(checks)} did"
        if skipped
        else f"trace:    1 of {len(RULES)} rules considered: the first rule matched"
    ]
    width = max(len(c.rule.name) for c in checks)
    for number, check in enumerate(checks, start=1):
        signal = check.rule.signal
        if len(signal) > SIGNAL_WIDTH:
            signal = signal[: SIGNAL_WIDTH - 3] + "..."
        verdict = "MATCH" if check.matched else "no"
        lines.append(f"  {number:>3}. {check.rule.name:<{width}}  {verdict:<5}  {signal}")
    return lines


def _explain(args: argparse.Namespace) -> int:
    if args.dag_id or args.task_id:
        return _explain_task(args)
    if args.live_pod or args.pod is None:
        return _explain_live(args)
    try:
        pod = load_pod(args.pod)
        events = load_events(args.events) if args.events else []
        policy = load_policy(args.policy) if args.policy else None
        logs = load_logs(pod, args.log)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return USAGE_ERROR
    now = time.time()
    verdict = classify_seen_for(
        pod, events, elapsed=args.elapsed, now=now, policy=policy, relaunches=args.relaunches, logs=logs
    )
    # Which rule matches depends on the pod, its Events, its logs and the pull causes they state, not
    # on time.
    checks = trace(pod, events, now=now, logs=logs) if args.trace else None
    if args.json:
        json.dump(explanation(verdict, now=now, elapsed=args.elapsed, checks=checks), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        render(verdict, now=now, elapsed=args.elapsed, pod=pod, out=sys.stdout, checks=checks)
    return 0


def _explain_live(args: argparse.Namespace) -> int:
    """``explain --pod NAME``: the pod and its Events as the cluster has them now."""
    if not args.live_pod:
        print("error: give a pod file (POD.json) or a live pod (--pod NAME)", file=sys.stderr)
        return USAGE_ERROR
    if args.events or args.log:
        flag = "--events" if args.events else "--log"
        print(f"error: {flag} goes with a pod file; --pod reads the cluster as it is", file=sys.stderr)
        return USAGE_ERROR
    try:
        policy = load_policy(args.policy) if args.policy else None
        live = read_live_pod(args.live_pod, args.namespace, args.conn_id)
    except (InputError, LivePodError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return USAGE_ERROR
    now = time.time()
    relaunches = args.relaunches or live.relaunches
    # The trigger's own memory of this pod (its timers, as they stand now), unless --elapsed says
    # how long the signals have been seen.
    remembered = live.history if not args.elapsed else None
    if remembered is not None:
        verdict = classify(live.pod, live.events, remembered, now=now, policy=policy, relaunches=relaunches)
        seen = remembered.first_seen
        elapsed = max(0.0, now - min(seen.values())) if seen else 0.0
    else:
        verdict = classify_seen_for(
            live.pod, live.events, elapsed=args.elapsed, now=now, policy=policy, relaunches=relaunches
        )
        elapsed = args.elapsed
    # The trace reads the same memory as the verdict: a decayed pull message is explained by the
    # strongest cause the trigger remembers, as it was for the verdict.
    checks = trace(live.pod, live.events, remembered, now=now) if args.trace else None
    if args.json:
        result = explanation(verdict, now=now, elapsed=elapsed, checks=checks)
        result["stamped"] = live.stamped.summary() if live.stamped else None
        result["source"] = live.source
        json.dump(result, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    render(verdict, now=now, elapsed=elapsed, pod=live.pod, out=sys.stdout, checks=checks)
    sys.stdout.write(f"read:     live from {live.source}, {len(live.events)} Events")
    sys.stdout.write("; timers from the trigger's history on the pod\n" if live.history else "\n")
    if live.stamped is not None:
        sys.stdout.write(
            f"stamped:  {live.stamped.outcome.value.upper()}  {live.stamped.reason.value} "
            "(the verdict this package already acted on)\n"
        )
    return 0


def _explain_task(args: argparse.Namespace) -> int:
    """``explain --dag-id D --task-id T``: every try of the task, each failed try with its cause."""
    if not (args.dag_id and args.task_id) or args.pod or args.live_pod:
        print("error: --dag-id and --task-id go together, without a pod", file=sys.stderr)
        return USAGE_ERROR
    # Airflow logs to standard output as it starts; that stays off the answer (JSON with --json).
    with contextlib.redirect_stdout(sys.stderr):
        from airflow_k8s_retry.plugins.tries import load_records, load_task_tries

        tries = load_task_tries(args.dag_id, args.task_id, args.run_id)
        records = load_records(
            datetime.fromtimestamp(0, UTC),
            datetime.now(UTC),
            args.dag_id,
            task_id=args.task_id,
            run_id=args.run_id,
        )
    if not tries:
        print(
            f"error: no task instance of {args.dag_id}.{args.task_id} in the metadata database",
            file=sys.stderr,
        )
        return USAGE_ERROR
    causes = {(r.run_id, r.map_index, r.try_number): r for r in records}
    rows: list[dict[str, Any]] = []
    for run_id, map_index, try_number, state in tries:
        cause = causes.get((run_id, map_index, try_number))
        tried = {"run_id": run_id, "map_index": map_index, "try_number": try_number, "state": state}
        said = ("outcome", "reason", "message", "hint", "pod_name")
        rows.append(tried | {k: getattr(cause, k) if cause else None for k in said})
    if args.json:
        json.dump({"dag_id": args.dag_id, "task_id": args.task_id, "tries": rows}, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    lines = [f"task:     {args.dag_id}.{args.task_id}"]
    run = None
    for row in rows:
        if row["run_id"] != run:
            run = row["run_id"]
            lines.append(f"run:      {run}")
        index = f"[{row['map_index']}]" if row["map_index"] >= 0 else ""
        what = f"{row['reason']}: {row['message']}" if row["reason"] else "no pod failure recorded"
        lines.append(f"  try {row['try_number']}{index}  {row['state']!s:<14} {what}")
        if row["hint"]:
            lines.append(f"{'':>10}hint: {row['hint']}")
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


def _simulate(args: argparse.Namespace) -> int:
    try:
        from airflow_k8s_retry_testing.serve import serve
    except ModuleNotFoundError as error:
        if error.name != "airflow_k8s_retry_testing":
            raise
        sys.stderr.write(
            "airflow-k8s-retry simulate: the simulator is not installed; "
            'pip install "airflow-k8s-retry[testing]"\n'
        )
        return 2

    return serve(scenario=args.scenario, port=args.port, kubeconfig=args.kubeconfig, audit=args.audit)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="airflow-k8s-retry",
        description="Classify Kubernetes pod failures the way RetryingPodOperator does, offline.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    explain = commands.add_parser(
        "explain",
        help="say which rule matches a pod and why",
        description="Classify a pod saved as JSON: outcome, reason code, matching rule and deadline.",
    )
    explain.add_argument(
        "pod", metavar="POD.json", nargs="?", help="the pod: kubectl get pod NAME -o json ('-' for stdin)"
    )
    add_live_arguments(explain)
    explain.add_argument(
        "--events",
        metavar="EVENTS.json",
        help="the pod's Events: kubectl get events --field-selector involvedObject.name=NAME -o json",
    )
    explain.add_argument(
        "--log",
        action="append",
        default=[],
        metavar="[CONTAINER=]FILE",
        help="a failed container's last log lines, as the trigger reads them (kubectl logs NAME -c CONTAINER "
        "--tail 20 [--previous]); CONTAINER defaults to the pod's first container; repeatable",
    )
    explain.add_argument(
        "--elapsed",
        type=_seconds,
        default=0.0,
        metavar="SECONDS",
        help="how long the signals in the pod have already been seen (default 0)",
    )
    explain.add_argument(
        "--policy", metavar="POLICY.json", help="a FailurePolicy payload (FailurePolicy.to_payload())"
    )
    explain.add_argument(
        "--relaunches", type=_count, default=0, metavar="N", help="relaunches already used in this try"
    )
    explain.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    explain.add_argument(
        "--trace",
        action="store_true",
        help="also list every rule considered before the one that matched, with what each looks for",
    )
    explain.add_argument(
        "--dag-id", metavar="DAG_ID", help="with --task-id: every try of a task, from Airflow"
    )
    explain.add_argument("--task-id", metavar="TASK_ID", help="the task whose tries --dag-id lists")
    explain.add_argument("--run-id", metavar="RUN_ID", help="only this DAG run's tries (with --dag-id)")
    explain.set_defaults(handler=_explain)

    simulate = commands.add_parser(
        "simulate",
        help="serve the Kubernetes API simulator and write a kubeconfig for it",
        description="Serve FakeCluster, this package's Kubernetes API simulator, until interrupted.",
    )
    simulate.add_argument("--scenario", metavar="FILE", help="a kubelet scenario file (YAML)")
    simulate.add_argument(
        "--port", type=_count, default=0, metavar="N", help="port to listen on (default: any free port)"
    )
    simulate.add_argument("--kubeconfig", metavar="OUT", help="where to write a kubeconfig for the simulator")
    simulate.add_argument("--audit", metavar="FILE", help="append every API request to this file")
    simulate.set_defaults(handler=_simulate)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit status."""
    args = build_parser().parse_args(argv)
    return int(args.handler(args))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
