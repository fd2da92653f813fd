"""Every reason code has a one-line fix hint, reachable from the reason and from a verdict."""

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


def test_a_verdict_carries_the_hint_of_its_reason_and_its_payload_keeps_its_shape() -> None:
    pod = {
        "metadata": {"name": "p"},
        "status": {
            "phase": "Pending",
            "containerStatuses": [{"name": "base", "state": {"waiting": {"reason": "InvalidImageName"}}}],
        },
    }
    verdict = classify(pod, now=T0)
    assert verdict.hint == hint_for(Reason.IMAGE_INVALID_NAME)
    payload = verdict.to_payload()
    assert set(payload) == {"outcome", "reason", "message", "rule", "deadline", "evidence", "history"}
    assert Verdict.from_payload(payload).hint == verdict.hint


def test_an_unknown_reason_code_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="is not a valid Reason"):
        hint_for("image.nope")
