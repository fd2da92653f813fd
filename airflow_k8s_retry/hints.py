"""Fix hints: one line per reason code saying what to do about a failure.

The hints belong to the classifier (``classification.hint_for``, one per reason code); this module
is where the failure reports and the failures page read them, so an XCom with a reason code this
version does not know shows no hint instead of breaking the page.

Example::

    >>> with_hint("container.exit_code: base failed", None)
    'container.exit_code: base failed'
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from airflow_k8s_retry.classification.model import Verdict


def fix_hint(reason: str) -> str | None:
    """The classifier's one-line fix hint for reason code ``reason`` (``hint_for``), or ``None``
    when it has none: a reason code this version does not know (a newer package wrote the XCom).
    """
    from airflow_k8s_retry.classification import Reason, hint_for

    try:
        return hint_for(Reason(reason)) or None
    except (ValueError, KeyError):
        return None


def with_hint(report: str, verdict: Verdict | None) -> str:
    """``report`` with the verdict's fix hint as its first line, when there is one."""
    if verdict is None:
        return report
    hint = fix_hint(verdict.reason.value)
    return f"fix: {hint}\n{report}" if hint else report
