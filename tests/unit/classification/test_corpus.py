"""Every real-world case in corpus/ gets the verdict its file expects.

A case file holds ``description``, ``pod`` (API JSON), ``events`` (API JSON), optionally
``elapsed_seconds`` (how long its signals have been seen), ``policy`` (a ``FailurePolicy`` payload),
``relaunches`` and ``logs`` (the last lines of a container's log, by container name, as the trigger
reads them before a failure leaves), and ``expect`` (``outcome`` and ``reason``). A case whose
wording was copied from a public report carries ``source``: the ``url`` where that exact ``text``
was seen, the ``runtime`` (and ``registry``) it came from, and ``seen_as`` (which field or log
showed it); the pod and Events around the text are written for the case. A case for a field a newer
Kubernetes added (native sidecars, restart rules, resize conditions, ``observedGeneration``) carries
``shape``: the ``url`` of the Kubernetes documentation or KEP that defines the field, and the
``fields`` of the case's pod (dotted paths, ``[i]`` for a list item) written in that shape.
"""

from __future__ import annotations

import json
import re
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
FIELDS = {
    *("description", "source", "shape", "pod", "events", "elapsed_seconds", "expect", "policy", "relaunches"),
    "logs",
}
SOURCE_FIELDS = {"url", "runtime", "registry", "seen_as", "text"}


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
        logs=case.get("logs"),
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


def messages(case: dict[str, Any]) -> list[str]:
    """Every message text of the case: pod status and conditions, container states, Events, logs."""
    status = case["pod"].get("status") or {}
    found = [str(status.get("message", ""))]
    found += [str(c.get("message", "")) for c in status.get("conditions") or []]
    found += [str(text) for text in (case.get("logs") or {}).values()]
    for key in ("initContainerStatuses", "containerStatuses"):
        for entry in status.get(key) or []:
            for state in (entry.get("state") or {}).values():
                found.append(str(state.get("message", "")))
    found += [str(e.get("message", "")) for e in case["events"]]
    return found


SOURCED = [p for p in CASES if "source" in load(p)]


def test_at_least_forty_cases_carry_wording_copied_from_a_public_source() -> None:
    assert len(SOURCED) >= 40


@pytest.mark.parametrize("path", SOURCED, ids=[p.stem for p in SOURCED])
def test_a_sourced_case_quotes_its_source_verbatim(path: Path) -> None:
    case = load(path)
    source = case["source"]
    assert set(source) <= SOURCE_FIELDS, path
    assert source["url"].startswith("https://"), path
    assert source["runtime"].strip() and source["seen_as"].strip(), path
    # The copied text is in the case as it was seen, not paraphrased.
    assert any(source["text"] in message for message in messages(case)), path


SHAPED = [p for p in CASES if "shape" in load(p)]


def field_at(data: Any, path: str) -> Any:
    """The value at a dotted ``path`` such as ``spec.containers[0].restartPolicyRules[0].action``."""
    for part in path.split("."):
        name, *indexes = re.split(r"\[(\d+)\]", part)
        data = data[name]
        for index in filter(None, indexes):
            data = data[int(index)]
    return data


def test_cases_of_newer_kubernetes_fields_cite_where_the_fields_are_defined() -> None:
    assert len(SHAPED) >= 14
    for path in SHAPED:
        shape = load(path)["shape"]
        assert set(shape) == {"url", "fields"}, path
        assert shape["url"].startswith(("https://kubernetes.io/", "https://github.com/kubernetes/")), path
        assert shape["fields"], path


@pytest.mark.parametrize("path", SHAPED, ids=[p.stem for p in SHAPED])
def test_a_shaped_case_has_the_fields_it_cites(path: Path) -> None:
    case = load(path)
    for field in case["shape"]["fields"]:
        assert field_at(case["pod"], field) is not None, (path, field)


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
