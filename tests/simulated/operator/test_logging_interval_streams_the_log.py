"""``logging_interval`` (KPO's argument): the base container's log reaches the task log while the
pod runs, through the trigger's log, and the worker then writes only what was not streamed.

The trigger runs as the triggerer runs it, against the simulator over HTTP with the real
``kubernetes_asyncio`` client; the worker's side is the operator's ``execute_complete`` with the
synchronous client. Together they must write every line of the container's log exactly once, in
order, at the cost of one ``pods/log`` request per interval while the container runs.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import pytest

from airflow_k8s_retry.classification.model import Outcome, Reason
from airflow_k8s_retry.exceptions import PodFailure
from tests.support.lab import Run
from tests.support.operator_try import defer, event_for, operator, verdict

LINES = [f"step {i:03d}" for i in range(1, 201)]
LINE = re.compile(r"\[base\] (step \d{3})\b")

pytestmark = pytest.mark.fake_cluster(time_scale=0.05)


def log_reads(cluster: Any) -> int:
    return sum(1 for r in cluster.audit_records() if r.get("resource") == "pods/log")


def written(caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]) -> list[str]:
    text = caplog.text + capsys.readouterr().out
    caplog.clear()
    return LINE.findall(text)


def slow_pod_exiting(exit_code: int) -> Any:
    """The case ``exit_code`` with its cluster: an image that logs ``LINES`` over 80 s, then exits so."""
    run = {"duration_seconds": 80, "exit_code": exit_code, "log": "\n".join(LINES)}
    scenario = {"time_scale": 0.05, "images": {"slow:1": {"run": run}}}
    return pytest.param(exit_code, marks=pytest.mark.fake_cluster(scenario))


@pytest.mark.parametrize("exit_code", [slow_pod_exiting(0), slow_pod_exiting(1)])
async def test_streamed_lines_and_the_final_log_together_hold_each_line_once(
    exit_code: int, fake_cluster: Any, context: dict[str, Any], caplog: pytest.LogCaptureFixture, capsys: Any
) -> None:
    caplog.set_level(logging.INFO)
    op = operator(image="slow:1", logging_interval=1)
    trigger = defer(op, context)
    assert trigger.serialize()[1]["logging_interval"] == 1.0
    written(caplog, capsys)  # the worker's lines so far (create, defer)

    reads = log_reads(fake_cluster)
    event = await Run(trigger).start().finish(within=60)
    streamed = written(caplog, capsys)
    by_trigger = log_reads(fake_cluster) - reads
    assert event.log_position is not None and streamed, "nothing was streamed while the pod ran"
    assert by_trigger >= 1

    reads = log_reads(fake_cluster)
    if exit_code == 0:
        assert event.verdict.outcome is Outcome.SUCCEED
        op.execute_complete(context, event=event.to_payload())
    else:
        with pytest.raises(PodFailure):
            op.execute_complete(context, event=event.to_payload())
    rest = written(caplog, capsys)
    assert streamed + rest == LINES, f"{len(streamed)} streamed + {len(rest)} at the end"
    # The worker reads the base container once, as without streaming (the failure report reads no
    # separate tail: the whole log follows it).
    assert log_reads(fake_cluster) - reads == 1
    print(f"log requests: trigger {by_trigger} for {len(streamed)} streamed lines, worker {len(rest)} lines")


def test_get_logs_streams_live_by_default_every_30_seconds(fake_cluster, context):
    assert defer(operator(), context).serialize()[1]["logging_interval"] == 30.0


@pytest.mark.parametrize("kwargs", [{"logging_interval": None}, {"get_logs": False}])
def test_without_live_logs_nothing_streams(fake_cluster, context, kwargs):
    assert defer(operator(**kwargs), context).serialize()[1]["logging_interval"] is None


@pytest.mark.fake_cluster({"time_scale": 0.05, "images": {"slow:1": {"run": {"log": "\n".join(LINES)}}}})
def test_with_logging_interval_none_the_worker_writes_the_whole_log(fake_cluster, context, caplog, capsys):
    caplog.set_level(logging.INFO)
    op = operator(image="slow:1", logging_interval=None)
    trigger = defer(op, context)
    assert trigger.serialize()[1]["logging_interval"] is None
    assert fake_cluster.wait_for(
        lambda c: ((c.pod(trigger.pod_name) or {}).get("status") or {}).get("phase") == "Succeeded", 20
    )
    op.execute_complete(context, event=event_for(trigger, verdict(Outcome.SUCCEED, Reason.SUCCEEDED)))
    assert written(caplog, capsys)[-200:] == LINES


@pytest.mark.parametrize("value", [0, -5, "soon", True])
def test_a_bad_logging_interval_is_refused_in_one_line(value: Any) -> None:
    with pytest.raises(ValueError, match="logging_interval must be a positive number of seconds") as raised:
        operator(logging_interval=value)
    assert "\n" not in str(raised.value)
