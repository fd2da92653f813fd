"""Every reason code has a one-line fix hint, from one function (``hint_for``), for a reason or its
value; a code this release does not know has none."""

from __future__ import annotations

import pytest

from airflow_k8s_retry.classification import REASONS, Reason, Verdict, classify, hint_for, meaning_of

T0 = 1_773_480_000.0


@pytest.mark.parametrize("reason", list(Reason), ids=[r.value for r in Reason])
def test_every_reason_code_has_a_one_line_hint_and_meaning(reason: Reason) -> None:
    hint = hint_for(reason)
    assert hint.strip() == hint and hint, reason
    assert "\n" not in hint and len(hint) <= 160, reason
    assert meaning_of(reason.value) == REASONS[reason].meaning
    assert hint_for(reason.value) == hint


def test_the_hint_table_has_no_stale_entries() -> None:
    assert set(REASONS) == set(Reason)


def test_a_verdicts_reason_gives_its_hint_and_its_payload_keeps_its_shape() -> None:
    pod = {
        "metadata": {"name": "p"},
        "status": {
            "phase": "Pending",
            "containerStatuses": [{"name": "base", "state": {"waiting": {"reason": "InvalidImageName"}}}],
        },
    }
    verdict = classify(pod, now=T0)
    assert hint_for(verdict.reason) == REASONS[Reason.IMAGE_INVALID_NAME].hint
    payload = verdict.to_payload()
    assert set(payload) == {"outcome", "reason", "message", "rule", "deadline", "evidence", "history"}
    assert hint_for(Verdict.from_payload(payload).reason) == hint_for(payload["reason"])


def test_an_unknown_reason_code_has_no_hint() -> None:
    # A newer release may have written the code (an XCom, a retry reason): no hint, no error.
    assert hint_for("image.nope") is None
