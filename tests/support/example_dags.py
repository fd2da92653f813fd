"""The example DAGs in dags/ as the tiers that run them see them: what each run must show (its tries,
their final states, the pods they cost, the reasons stamped on them), whether FakeCluster plays the
demo's scenario (tests/airflow/end_to_end) or a real control plane does (tests/cluster), and the
demo's scenario as the real control plane plays it."""

from __future__ import annotations

from dataclasses import dataclass

from airflow_k8s_retry.compat import HAS_RETRY_POLICIES
from airflow_k8s_retry_testing.scenario import Scenario
from demo.run import SCENARIO


@dataclass(frozen=True)
class Expected:
    dag_run: str
    tasks: dict[str, tuple[int, str]]  # task_id: (tries, final state)
    pods: int  # pods created by RetryingPodOperator
    reasons: frozenset[str] = frozenset()  # reason codes stamped on the pods, if any


EXPECTED = {
    "01_basic": Expected("success", {"hello": (1, "success")}, pods=1),
    "02_image_pull_retry": Expected(
        "failed", {"pull_missing_image": (4, "failed")}, pods=4, reasons=frozenset({"image.not_found"})
    ),
    "03_rate_limit_recovers": Expected("success", {"pull_through_throttle": (1, "success")}, pods=1),
    "04_missing_secret": Expected(
        "failed", {"needs_db_password": (2, "failed")}, pods=2, reasons=frozenset({"config.missing_secret"})
    ),
    "05_eviction_relaunch": Expected("success", {"train": (1, "success")}, pods=2),
    "06_sensor": Expected("success", {"start_report": (1, "success"), "wait_for_report": (1, "success")}, 0),
    # Airflow 3.3's retry policy fails the OOM at once; 3.1 and 3.2 ignore it and spend every try.
    "07_retry_policy": Expected(
        "failed",
        {"export": (2, "success"), "join": (1, "failed") if HAS_RETRY_POLICIES else (4, "failed")},
        pods=3 if HAS_RETRY_POLICIES else 6,
    ),
    # Held by its scheduling gate past schedule_timeout, admitted, run: one try, one pod.
    "08_queued_pod": Expected("success", {"train_when_admitted": (1, "success")}, pods=1),
}


#: The images of 05 and 07 in the demo's scenario.
TRAIN = "example.com/ml/train:2"
EXPORT = "registry.example.com/team/export:2"


def demo_scenario_on_a_control_plane() -> Scenario:
    """demo/scenario.yaml, with 05's eviction where the trigger already watches (and without 07's
    image).

    FakeCluster's ``evict`` keeps the evicted pod (a kubelet eviction); the real one is the
    Eviction API, whose graceful deletion KWOK confirms at once, so a pod evicted before the
    trigger's first look is simply gone (``pod.deleted_externally``, a spent try: what a real
    cluster does to a pod whose container exits at SIGTERM). ``airflow dags test`` starts the
    trigger a few seconds after the pod on a busy machine; evicting after 10 s (not 1 s), in a
    20 s run (not 3 s), puts the eviction where the trigger watches, which is what 05 is about.
    """
    import yaml

    data = yaml.safe_load(SCENARIO.read_text())
    # 07's registry outage ends after its first pod (``for_pods``), which only FakeCluster plays;
    # 07 does not run here.
    del data["images"][EXPORT]
    data["images"][TRAIN]["run"]["duration_seconds"] = 200
    (evict,) = [d for d in data["disruptions"] if d["pod_name_prefix"].startswith("05-")]
    evict["after_seconds"] = 100
    return Scenario.from_dict(data)
