"""``logging_interval`` under real Airflow (``airflow dags test``): the container's lines appear in
the task's output while the pod runs (from the trigger), and each line appears exactly once."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.scenarios import Scenario, run_scenario
from tools.airflow_runner import MigratedDatabase

LINES = [f"step {i:03d}" for i in range(1, 201)]
STREAMING = Scenario(
    "e2e_logging_interval",
    """
    RetryingPodOperator(task_id="stream", image="example.com/etl:slow", logging_interval=1)
    """,
    {
        "time_scale": 0.05,
        "images": {"example.com/etl:slow": {"run": {"duration_seconds": 100, "log": "\n".join(LINES)}}},
    },
)
TRIGGER = "airflow_k8s_retry.triggers.pod.PodStateTrigger"  # the logger the trigger logs under


def test_logging_interval_streams_lines_into_the_task_log(
    tmp_path: Path, migrated_database: MigratedDatabase
) -> None:
    run = run_scenario(STREAMING, tmp_path, migrated_database, timeout=240)
    output = run.result.output
    assert run.result.final_state("stream") == "success", output[-3000:]
    rows = [row for row in output.splitlines() if re.search(r"\[base\] step \d{3}\b", row)]
    seen = [re.search(r"\[base\] (step \d{3})\b", row).group(1) for row in rows]  # type: ignore[union-attr]
    assert seen == LINES, f"{len(seen)} lines, first differences: {sorted(set(LINES) ^ set(seen))[:5]}"
    streamed = [row for row in rows if TRIGGER in row]
    assert streamed, "no line came from the trigger while the pod ran"
    log_reads = [r for r in run.audit if r.get("resource") == "pods/log"]
    print(f"{len(streamed)} of {len(LINES)} lines streamed; pods/log requests: {len(log_reads)}")
