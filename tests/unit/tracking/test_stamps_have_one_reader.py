"""The pod annotations this package writes (``kube/naming.py``): what is written reads back the
same, and whatever else sits in an annotation (a foreign value, a truncated edit, another
version's shape) reads as no stamp instead of raising inside a trigger, a sweep or ``explain``."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_k8s_retry.classification.model import Evidence, History, Outcome, Reason, Verdict
from airflow_k8s_retry.kube.naming import (
    HISTORY_ANNOTATION,
    VERDICT_ANNOTATION,
    encode_history,
    encode_stamp,
    read_history,
    read_stamp,
)
from airflow_k8s_retry.triggers.tracker import stamped_verdict

HISTORY = History(
    first_seen={"image.rate_limited:base": 1_764_000_000.5, "pod.unschedulable": 1_764_000_010.0},
    strongest=Evidence(Reason.IMAGE_RATE_LIMITED, "event", "429 Too Many Requests", "base", 1_764_000_001.0),
)
VERDICT = Verdict(Outcome.RETRY, Reason.CONTAINER_EXIT_CODE, "exited 3", rule="container.exit_code")


def pod(annotations: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p", "annotations": annotations}}


def test_a_history_reads_back_as_written_and_its_text_is_stable() -> None:
    text = encode_history(HISTORY)
    assert read_history(pod({HISTORY_ANNOTATION: text})) == HISTORY
    reordered = History(
        first_seen=dict(reversed(list(HISTORY.first_seen.items()))), strongest=HISTORY.strongest
    )
    assert encode_history(reordered) == text  # the same memory patches the same string


def test_a_verdict_stamp_reads_back_with_what_it_says_of_keeping_the_pod() -> None:
    for kept in (True, False):
        found = read_stamp(pod({VERDICT_ANNOTATION: encode_stamp(VERDICT, kept=kept)}))
        assert found is not None and found.kept is kept
        assert (found.verdict.outcome, found.verdict.reason, found.verdict.message) == (
            VERDICT.outcome,
            VERDICT.reason,
            VERDICT.message,
        )
    stamped = pod({VERDICT_ANNOTATION: encode_stamp(VERDICT, kept=False)})
    found = read_stamp(stamped)
    assert found is not None and stamped_verdict(stamped) == found.verdict  # the tracker reads the same


@pytest.mark.parametrize(
    "value",
    [
        "",
        "not json",
        "[1, 2]",
        '"a string"',
        "{}",
        '{"first_seen": {"x": "soon"}}',
        '{"outcome": "maybe"}',
        "null",
    ],
)
@pytest.mark.parametrize("key", [HISTORY_ANNOTATION, VERDICT_ANNOTATION])
def test_an_unreadable_annotation_reads_as_none(key: str, value: str) -> None:
    found = read_history(pod({key: value})) if key == HISTORY_ANNOTATION else read_stamp(pod({key: value}))
    assert found is None or found == History()  # an empty history object is no memory at all


@pytest.mark.parametrize("shape", [None, {}, {"metadata": None}, pod(None), pod(["a"]), pod("text")])
def test_a_pod_without_annotations_has_no_stamps(shape: Any) -> None:
    assert read_history(shape) is None
    assert read_stamp(shape) is None
