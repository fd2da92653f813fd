"""Every real-world case in corpus/ gets the verdict its file expects.

A case file holds ``description``, ``pod`` (API JSON), ``events`` (API JSON), optionally
``elapsed_seconds`` (how long its signals have been seen), ``policy`` (a ``FailurePolicy``
payload) and ``relaunches``, and ``expect`` (``outcome`` and ``reason``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from airflow_k8s_retry.classification import (
    RULES,
    FailurePolicy,
    Outcome,
    Reason,
    Verdict,
    classify_seen_for,
)

CORPUS = Path(__file__).parent / "corpus"
CASES = sorted(CORPUS.glob("*.json"))
NOW = 1_773_480_000.0
FIELDS = {"description", "pod", "events", "elapsed_seconds", "expect", "policy", "relaunches"}


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def verdict_for(case: dict[str, Any]) -> Verdict:
    return classify_seen_for(
        case["pod"],
        case["events"],
        elapsed=case.get("elapsed_seconds", 0),
        now=NOW,
        policy=FailurePolicy.from_payload(case.get("policy")),
        relaunches=case.get("relaunches", 0),
    )


def test_corpus_is_large_and_well_formed() -> None:
    assert len(CASES) >= 40
    for path in CASES:
        case = load(path)
        assert set(case) <= FIELDS, path
        assert case["description"].strip(), path
        assert case["pod"]["kind"] == "Pod", path
        Outcome(case["expect"]["outcome"])
        Reason(case["expect"]["reason"])


def test_corpus_reaches_every_rule_a_pod_file_can_reach() -> None:
    reached = {verdict_for(load(path)).rule for path in CASES}
    # Rules for a vanished pod need pod=None, the catch-all a pod in no known phase: tested on their own.
    missing = (
        {r.name for r in RULES}
        - reached
        - {"gone_after_disruption", "gone_after_node_lost", "pod_gone", "unrecognised"}
    )
    assert not missing, f"no corpus case reaches rules {sorted(missing)}"


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_corpus_case(path: Path) -> None:
    case = load(path)
    verdict = verdict_for(case)
    got = (verdict.outcome.value, verdict.reason.value)
    assert got == (case["expect"]["outcome"], case["expect"]["reason"]), verdict.message
    assert verdict.message
    if verdict.outcome is Outcome.WAIT:
        assert verdict.deadline is not None
        assert verdict.deadline > NOW
    else:
        assert verdict.deadline is None
