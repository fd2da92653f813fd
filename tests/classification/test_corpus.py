"""Every real-world case in corpus/ gets the verdict its file expects."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from airflow_k8s_retry.classification import (
    FailurePolicy,
    Outcome,
    Reason,
    classify_seen_for,
    rule_named,
)

CORPUS = Path(__file__).parent / "corpus"
CASES = sorted(CORPUS.glob("*.json"))
NOW = 1_773_480_000.0


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def test_corpus_is_large_and_well_formed() -> None:
    assert len(CASES) >= 40
    for path in CASES:
        case = load(path)
        assert set(case) <= {"description", "pod", "events", "elapsed_seconds", "expect", "policy", "relaunches"}, path
        assert case["description"].strip(), path
        assert case["pod"]["kind"] == "Pod", path
        Outcome(case["expect"]["outcome"])
        Reason(case["expect"]["reason"])


def test_corpus_covers_every_rule_that_can_be_observed() -> None:
    rules_hit = set()
    for path in CASES:
        case = load(path)
        verdict = classify_seen_for(
            case["pod"], case["events"], elapsed=case.get("elapsed_seconds", 0), now=NOW,
            policy=FailurePolicy.from_payload(case.get("policy")), relaunches=case.get("relaunches", 0),
        )
        rules_hit.add(verdict.rule)
    # pod_gone needs pod=None (no file can hold it) and the catch-all needs a pod in no known phase;
    # both have their own tests.
    from airflow_k8s_retry.classification import RULES

    missing = {r.name for r in RULES} - rules_hit - {"pod_gone", "unrecognised"}
    assert not missing, f"no corpus case reaches rules {sorted(missing)}"
    for name in rules_hit:
        rule_named(name)


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_corpus_case(path: Path) -> None:
    case = load(path)
    verdict = classify_seen_for(
        case["pod"],
        case["events"],
        elapsed=case.get("elapsed_seconds", 0),
        now=NOW,
        policy=FailurePolicy.from_payload(case.get("policy")),
        relaunches=case.get("relaunches", 0),
    )
    expect = case["expect"]
    assert (verdict.outcome.value, verdict.reason.value) == (expect["outcome"], expect["reason"]), verdict.message
    assert verdict.message
    if verdict.outcome is Outcome.WAIT:
        assert verdict.deadline is not None and verdict.deadline > NOW
    else:
        assert verdict.deadline is None
