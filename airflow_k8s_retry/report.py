"""What a finished try shows people: the failure report in the task log, what it is made of, and
what stays out of it.

One home for presentation, on typed values: :func:`failure_report` turns a
:class:`~airflow_k8s_retry.classification.model.Verdict` and the pod it was judged on (its status
and Events, as the trigger carried them in a :class:`Snapshot` or as read) into the lines the
operator and the sensor write to the task log: the fix hint, the reason line, the classifier's
evidence, the pod's Events, its container states and, for the sensor, a log tail, under
:data:`REPORT_LIMIT` bytes.
:func:`withhold_termination_messages` keeps containers' termination messages (whatever a container
wrote, a Secret's value too) out of what is published: the trigger applies it once, to the verdict
it fires, so nothing downstream (XCom, the stamp, the exception, Airflow's database) holds one.
:func:`log_line` is KPO's formatting of a container's log line.

Example::

    >>> from airflow_k8s_retry.classification import Outcome, Reason, Verdict
    >>> verdict = Verdict(Outcome.RETRY, Reason.CONTAINER_EXIT_CODE, "base exited 3", "exit_code")
    >>> print(failure_report(verdict, pod=None, events=[]).splitlines()[1])
    container.exit_code: base exited 3
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from airflow_k8s_retry.classification.model import Verdict, hint_for

#: The largest failure report, in bytes of UTF-8.
REPORT_LIMIT = 4096
#: What replaces a termination message in published text.
WITHHELD = "<termination message withheld>"
#: How many of the pod's newest Events a report lists.
EVENTS_SHOWN = 10

Json = dict[str, Any]


def termination_messages(pod: Mapping[str, Any] | None, states: Sequence[str] = ("state",)) -> set[str]:
    """The non-empty ``terminated.message`` texts of ``pod``'s containers (init containers too),
    read from each of ``states`` (``"state"``, ``"lastState"``)."""
    status = (pod or {}).get("status") or {}
    found = {
        str(((cs.get(key) or {}).get("terminated") or {}).get("message") or "").strip()
        for kind in ("initContainerStatuses", "containerStatuses")
        for cs in status.get(kind) or []
        if isinstance(cs, Mapping)
        for key in states
    }
    return found - {""}


@dataclass(frozen=True)
class Snapshot:
    """What a trigger saw when it judged a pod, compact enough to travel in its event.

    The parts a failure report and the worker's decisions read: the pod's name and UID, its
    containers' names, termination-message policies, resources and restart policies, its status
    without the containers' termination messages (``withheld`` says whether there were any), and
    its newest Events. The spec's env, commands, volumes and annotations are left behind, so no
    secret value travels with it. ``pod`` is ``None`` when the pod was gone or replaced.
    """

    uid: str
    pod: Json | None
    events: list[Json] = field(default_factory=list)
    withheld: bool = False

    #: The largest snapshot (bytes of JSON) an event carries; a larger one is left out and the
    #: worker reads the pod and its Events itself.
    SIZE_LIMIT: ClassVar[int] = 16 * 1024
    #: How many of the pod's Events travel (the newest), as many as a failure report shows.
    EVENTS_KEPT: ClassVar[int] = EVENTS_SHOWN

    @classmethod
    def take(
        cls, pod: Mapping[str, Any] | None, events: Sequence[Mapping[str, Any]], uid: str
    ) -> Snapshot | None:
        """The snapshot of ``pod`` (the pod with ``uid``, else none) and its newest Events;
        ``None`` when it would be larger than :attr:`SIZE_LIMIT`."""
        ours = ((pod or {}).get("metadata") or {}).get("uid") == uid
        snapshot = cls(
            uid=uid,
            pod=_pod_part(pod) if ours else None,
            events=[{k: e[k] for k in _EVENT_FIELDS if k in e} for e in list(events)[-cls.EVENTS_KEPT :]],
            withheld=ours and bool(termination_messages(pod, ("state", "lastState"))),
        )
        try:
            size = len(json.dumps(snapshot.to_payload(), separators=(",", ":")).encode())
        except (TypeError, ValueError):
            return None
        return snapshot if size <= cls.SIZE_LIMIT else None

    def to_payload(self) -> dict[str, Any]:
        return {"uid": self.uid, "pod": self.pod, "withheld": self.withheld, "events": self.events}

    @classmethod
    def from_payload(cls, data: Any, uid: str) -> Snapshot | None:
        """The snapshot of the pod with ``uid`` in ``data``; ``None`` for none, an unreadable one,
        or one of another pod."""
        if not isinstance(data, Mapping) or data.get("uid") != uid:
            return None
        pod, events = data.get("pod"), data.get("events")
        if not isinstance(events, list) or not (pod is None or isinstance(pod, Mapping)):
            return None
        return cls(
            uid=uid,
            pod=dict(pod) if pod is not None else None,
            events=[dict(e) for e in events if isinstance(e, Mapping)],
            withheld=bool(data.get("withheld")),
        )


_STATUS_FIELDS = ("phase", "reason", "message", "conditions", "initContainerStatuses", "containerStatuses")
_EVENT_FIELDS = ("type", "reason", "count", "message")
_CONTAINER_FIELDS = ("name", "terminationMessagePolicy", "resources", "restartPolicy")


def _pod_part(pod: Mapping[str, Any] | None) -> Json:
    meta = (pod or {}).get("metadata") or {}
    spec = (pod or {}).get("spec") or {}
    status = (pod or {}).get("status") or {}
    return {
        "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace"), "uid": meta.get("uid")},
        "spec": {
            kind: [{k: c[k] for k in _CONTAINER_FIELDS if k in c} for c in spec.get(kind) or []]
            for kind in ("initContainers", "containers")
            if spec.get(kind)
        },
        "status": {k: _without_termination_messages(k, status[k]) for k in _STATUS_FIELDS if k in status},
    }


def _without_termination_messages(name: str, value: Any) -> Any:
    """Container statuses without ``terminated.message``: a container may write anything there (a
    Secret's value too), and the event is stored in Airflow's database as it is."""
    if name not in ("initContainerStatuses", "containerStatuses") or not isinstance(value, list):
        return value
    out = []
    for item in value:
        if not isinstance(item, Mapping):
            out.append(item)
            continue
        status = dict(item)
        for key in ("state", "lastState"):
            state = status.get(key)
            if isinstance(state, Mapping) and isinstance(state.get("terminated"), Mapping):
                terminated = {k: v for k, v in state["terminated"].items() if k != "message"}
                status[key] = {**state, "terminated": terminated}
        out.append(status)
    return out


def withhold_termination_messages(verdict: Verdict, pod: Mapping[str, Any] | None) -> Verdict:
    """``verdict`` without ``pod``'s termination messages (in its message and evidence).

    A termination message is whatever the container wrote (with ``FallbackToLogsOnError``, the end
    of its log), so it stays out of XCom, the pod's annotation and the exception text.
    """
    messages = sorted(termination_messages(pod), key=len, reverse=True)
    if not messages:
        return verdict

    def scrub(text: str) -> str:
        for message in messages:
            for piece in (message, message[:500]):
                text = text.replace(piece, WITHHELD)
        return text

    evidence = tuple(replace(e, message=scrub(e.message)) for e in verdict.evidence)
    return replace(verdict, message=scrub(verdict.message), evidence=evidence)


def container_states(pod: Mapping[str, Any] | None) -> list[str]:
    """One line per container: name, state and its reason, exit code and message."""
    status = (pod or {}).get("status") or {}
    lines = []
    for kind in ("initContainerStatuses", "containerStatuses"):
        for cs in status.get(kind) or []:
            for phase, detail in (cs.get("state") or {}).items():
                if not detail:
                    continue
                bits = [f"{cs.get('name')}: {phase}"]
                if detail.get("reason"):
                    bits.append(str(detail["reason"]))
                if "exitCode" in detail:
                    bits.append(f"exit code {detail['exitCode']}")
                if detail.get("message"):
                    bits.append(str(detail["message"]))
                lines.append(", ".join(bits))
    return lines


def _clip(text: str, room: int) -> str:
    data = text.encode("utf-8")
    if len(data) <= room:
        return text
    marker = " [...]"
    return data[: max(0, room - len(marker))].decode("utf-8", "ignore") + marker


def failure_report(
    verdict: Verdict,
    *,
    pod: Mapping[str, Any] | None,
    events: Sequence[Mapping[str, Any]],
    log_tail: str = "",
    limit: int = REPORT_LIMIT,
) -> str:
    """The failure for a task log, under ``limit`` bytes: the fix hint, the reason line, then what
    supports it (the classifier's evidence), the pod's Events, its container states and a log tail.

    Env values never appear: only statuses, event messages and the container's own output.
    """
    hint = hint_for(verdict.reason)
    head = [f"fix: {_clip(hint, limit // 4)}"] if hint else []
    head += [
        _clip(f"{verdict.reason.value}: {verdict.message}", limit // 2),
        f"outcome: {verdict.outcome.value} (rule {verdict.rule})",
    ]
    sections = [
        (
            "evidence",
            [
                f"[{e.source}] {e.reason.value}"
                + (f" ({e.container})" if e.container else "")
                + f": {e.message}"
                for e in verdict.evidence
            ],
        ),
        (
            "events",
            [_event_line(e) for e in list(events)[-EVENTS_SHOWN:]],
        ),
        ("containers", container_states(pod)),
        ("log tail", [line for line in log_tail.splitlines() if line.strip()][-20:]),
    ]
    out, used = head, sum(len(line.encode()) + 1 for line in head)
    for title, lines in sections:
        if not lines:
            continue
        for line in [f"{title}:"] + [f"  {line}" for line in lines]:
            size = len(line.encode()) + 1
            if used + size > limit:
                room = limit - used - 1
                if room > 20:
                    out.append(_clip(line, room))
                return "\n".join(out)
            out.append(line)
            used += size
    return "\n".join(out)


def _event_line(event: Mapping[str, Any]) -> str:
    kind, reason, message = event.get("type", ""), event.get("reason", ""), event.get("message", "")
    return f"{kind} {reason} x{event.get('count') or 1}: {message}".strip()


def log_line(
    container: str, line: str, *, log_formatter: Callable[[str, str], str] | None, prefix: bool
) -> str:
    """A container's log line as KPO writes it to the task log: ``log_formatter(container, line)``
    when given, else ``[container] line`` when ``container_name_log_prefix_enabled``."""
    if log_formatter is not None:
        return str(log_formatter(container, line))
    return f"[{container}] {line}" if prefix else line
