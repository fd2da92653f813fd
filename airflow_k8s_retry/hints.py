"""Fix hints: one line per reason code saying what to do about a failure.

The hints belong to the classifier (each rule knows its cause best); this module is the one place
the operator's failure report, ``explain`` and the failures page read them from, so they all say
the same thing and none of them breaks where the classifier has no hint for a reason.

Example::

    >>> with_hint("container.exit_code: base failed", None)
    'container.exit_code: base failed'
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from airflow_k8s_retry.classification.model import Verdict


def fix_hint(reason: str) -> str | None:
    """The classifier's one-line fix hint for reason code ``reason``, or ``None`` when it has none.

    Unknown reason codes (a newer package wrote the XCom) have none either.
    """
    from airflow_k8s_retry.classification import RULES

    for rule in RULES:
        if rule.reason.value == reason or (rule.waiting_reason and rule.waiting_reason.value == reason):
            hint = getattr(rule, "hint", None)
            if isinstance(hint, str) and hint.strip():
                return hint.strip()
    return None


def with_hint(report: str, verdict: Verdict | None) -> str:
    """``report`` with the verdict's fix hint as its first line, when there is one."""
    if verdict is None:
        return report
    hint = fix_hint(verdict.reason.value)
    return f"fix: {hint}\n{report}" if hint else report
