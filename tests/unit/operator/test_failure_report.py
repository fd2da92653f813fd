"""The evidence written to the task log: the fix hint, then the reason line, bounded at 4 KB whatever
the input."""

from __future__ import annotations

from airflow_k8s_retry.classification import hint_for
from airflow_k8s_retry.classification.model import Evidence, Outcome, Reason, Verdict
from airflow_k8s_retry.report import REPORT_LIMIT, failure_report


def pull_failure_pod() -> dict:
    return {
        "metadata": {"name": "p"},
        "status": {
            "phase": "Pending",
            "containerStatuses": [
                {
                    "name": "base",
                    "state": {
                        "waiting": {
                            "reason": "ImagePullBackOff",
                            "message": 'Back-off pulling image "notavalidimage"',
                        }
                    },
                }
            ],
        },
    }


def verdict() -> Verdict:
    return Verdict(
        outcome=Outcome.RETRY,
        reason=Reason.IMAGE_NOT_FOUND,
        message="image notavalidimage not found in its registry",
        rule="image.not_found",
        evidence=(Evidence(Reason.IMAGE_NOT_FOUND, "event", "pull access denied ... not found", "base"),),
    )


def test_reason_line_first_then_each_section():
    events = [{"type": "Warning", "reason": "Failed", "count": 3, "message": "Failed to pull image"}]
    report = failure_report(verdict(), pod=pull_failure_pod(), events=events, log_tail="")
    lines = report.splitlines()
    assert lines[0] == f"fix: {hint_for('image.not_found')}"
    assert lines[1] == "image.not_found: image notavalidimage not found in its registry"
    assert lines[2] == "outcome: retry (rule image.not_found)"
    assert "evidence:" in lines and "events:" in lines and "containers:" in lines
    assert "  Warning Failed x3: Failed to pull image" in lines
    assert any("base: waiting, ImagePullBackOff" in line for line in lines)
    assert "log tail:" not in lines  # no log, no empty section


def test_huge_input_stays_under_the_limit_with_the_reason_line_intact():
    events = [{"type": "Warning", "reason": "BackOff", "message": "x" * 900} for _ in range(50)]
    log = "\n".join(f"line {i} " + "y" * 300 for i in range(500))
    report = failure_report(verdict(), pod=pull_failure_pod(), events=events, log_tail=log)
    assert len(report.encode()) <= REPORT_LIMIT
    assert report.splitlines()[1].startswith("image.not_found: ")


def test_multibyte_text_is_cut_on_character_boundaries():
    events = [{"type": "Warning", "reason": "Failed", "message": "é" * 5000}]
    report = failure_report(verdict(), pod=None, events=events, log_tail="")
    assert len(report.encode("utf-8")) <= REPORT_LIMIT
    report.encode("utf-8").decode("utf-8")
