"""``TryIdentity.selector``: the one spelling of "this task instance's pods" and "this try's pods"
that the sweep, the cleanups and the failure callback ask the API server for, and what it matches
is exactly what ``owns`` accepts."""

from __future__ import annotations

import pytest

from airflow_k8s_retry.kube.naming import MANAGED_SELECTOR, TryIdentity

RUN = "manual__2026-12-02T00:00:00+00:00"


def matches(selector: str, labels: dict[str, str]) -> bool:
    """Label selector semantics for what this package writes: ``key=value`` and ``!key``."""
    for term in selector.split(","):
        key, _, value = term.partition("=")
        if key.startswith("!") and key[1:] in labels:
            return False
        if not key.startswith("!") and labels.get(key) != value:
            return False
    return True


def test_a_tries_selector_names_the_managed_label_the_task_instance_and_the_try() -> None:
    identity = TryIdentity("etl", "load", RUN, try_number=3)
    labels = identity.labels()
    assert identity.selector("try").split(",") == [
        MANAGED_SELECTOR,
        "dag_id=etl",
        "task_id=load",
        f"run_id={labels['run_id']}",
        "!map_index",
        "try_number=3",
    ]
    assert identity.selector("instance") == identity.selector("try").removesuffix(",try_number=3")


def test_a_mapped_tries_selector_names_its_map_index_and_a_deployments_its_deployment() -> None:
    identity = TryIdentity("etl", "load", RUN, map_index=4, try_number=2, deployment="prod-eu")
    terms = identity.selector("try").split(",")
    assert "map_index=4" in terms and "!map_index" not in terms
    assert "airflow-k8s-retry.io/deployment=prod-eu" in terms


@pytest.mark.parametrize("map_index", [-1, 0, 7])
def test_what_a_selector_matches_of_other_tries_pods_is_what_owns_accepts(map_index: int) -> None:
    this = TryIdentity("etl", "load", RUN, map_index=map_index, try_number=2)
    others = [
        this,
        TryIdentity("etl", "load", RUN, map_index=map_index, try_number=1),
        TryIdentity("etl", "load", RUN, map_index=map_index + 1, try_number=2),
        TryIdentity("etl", "load", "scheduled__2026-12-01", map_index=map_index, try_number=2),
        TryIdentity("etl", "other", RUN, map_index=map_index, try_number=2),
        TryIdentity("etl", "load", RUN, map_index=map_index, try_number=2, deployment="other"),
    ]
    for other in others:
        for relaunch in (0, 1):
            labels = other.labels(relaunch)
            assert matches(this.selector("try"), labels) == this.owns(labels)
            same_instance = this.earlier(other.try_number).owns(labels)
            assert matches(this.selector("instance"), labels) == same_instance
