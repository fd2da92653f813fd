"""``airflow-k8s-retry explain``: a pod file in, the verdict, its rule, its fix hint and (``--trace``)
every rule considered out; bad files exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from airflow_k8s_retry.classification import RULES, hint_for, rule_named
from airflow_k8s_retry.cli import main
from tests.support.paths import CORPUS


def corpus(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((CORPUS / f"{name}.json").read_text())
    return data


def write(tmp_path: Path, name: str, content: Any) -> str:
    path = tmp_path / name
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return str(path)


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    status = main(argv)
    out, err = capsys.readouterr()
    return status, out, err


def test_human_output_names_outcome_reason_rule_and_deadline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pod = write(tmp_path, "pod.json", corpus("dockerhub_rate_limit_containerd")["pod"])
    status, out, err = run(["explain", pod], capsys)
    assert (status, err) == (0, "")
    assert "pod:      airflow-jobs/etl-load-orders-7f3c2a9b" in out
    assert "verdict:  WAIT  image.rate_limited" in out
    assert "rule:     image_rate_limited (rule " in out
    assert "deadline: in 15m" in out
    assert "toomanyrequests" in out


def test_json_output_is_one_object(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pod = write(tmp_path, "pod.json", corpus("ghcr_tag_not_found_containerd")["pod"])
    status, out, _ = run(["explain", pod, "--json"], capsys)
    assert status == 0
    result = json.loads(out)
    assert {"outcome", "reason", "message", "rule", "deadline_seconds"} <= set(result)
    assert (result["outcome"], result["reason"], result["rule"]) == (
        "wait",
        "image.not_found",
        "image_not_found",
    )
    assert result["deadline_seconds"] == pytest.approx(90.0)
    assert result["evidence"][0]["container"] == "base"


def test_elapsed_moves_the_verdict_along(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pod = write(tmp_path, "pod.json", corpus("ghcr_tag_not_found_containerd")["pod"])
    _, out, _ = run(["explain", pod, "--json", "--elapsed", "30"], capsys)
    assert json.loads(out)["deadline_seconds"] == pytest.approx(60.0)
    _, out, _ = run(["explain", pod, "--json", "--elapsed", "90"], capsys)
    result = json.loads(out)
    assert (result["outcome"], result["reason"], result["deadline_seconds"]) == (
        "retry",
        "image.not_found",
        None,
    )
    _, out, _ = run(["explain", pod, "--elapsed", "90"], capsys)
    assert "deadline: none (final verdict)" in out


@pytest.mark.parametrize("shape", ["list", "eventlist"])
def test_events_as_list_or_eventlist_restore_a_decayed_cause(
    shape: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    case = corpus("backoff_decayed_cause_from_events")
    pod = write(tmp_path, "pod.json", case["pod"])
    _, out, _ = run(["explain", pod, "--json"], capsys)
    assert json.loads(out)["reason"] == "image.pull_backoff"  # the status alone says nothing
    events = (
        case["events"]
        if shape == "list"
        else {"kind": "EventList", "apiVersion": "v1", "items": case["events"]}
    )
    _, out, _ = run(["explain", pod, "--json", "--events", write(tmp_path, "events.json", events)], capsys)
    assert json.loads(out)["reason"] == "image.not_found"


def test_policy_and_relaunches(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pod = write(tmp_path, "pod.json", corpus("evicted_node_memory_pressure")["pod"])
    _, out, _ = run(["explain", pod, "--json"], capsys)
    assert json.loads(out)["outcome"] == "relaunch"
    _, out, _ = run(["explain", pod, "--json", "--relaunches", "3"], capsys)
    assert json.loads(out)["outcome"] == "retry"
    policy = write(tmp_path, "policy.json", {"outcomes": {"node.disruption": "fail"}})
    _, out, _ = run(["explain", pod, "--json", "--policy", policy], capsys)
    assert json.loads(out)["outcome"] == "fail"


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("{not json", "is not JSON (Expecting property name"),
        ("", "is not JSON"),
        ("[1, 2]", "holds a JSON list, not a pod object"),
        ('"pod"', "holds a JSON str, not a pod object"),
        ({"kind": "Deployment", "spec": {}}, "holds a Deployment, not a Pod"),
        ({"kind": "List", "items": []}, "holds a list; save one pod"),
        ({"metadata": {"name": "x"}}, "is not a pod: it has neither a 'status' nor a 'spec'"),
    ],
)
def test_a_file_that_is_not_a_pod_gets_one_line_and_status_2(
    content: Any, problem: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, "pod.json", content)
    status, out, err = run(["explain", path], capsys)
    assert status == 2
    assert out == ""
    assert err.count("\n") == 1
    assert err.startswith(f"error: pod file {path} ")
    assert problem in err


def test_missing_and_bad_companion_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pod = write(tmp_path, "pod.json", corpus("succeeded")["pod"])
    status, _, err = run(["explain", str(tmp_path / "nope.json")], capsys)
    assert status == 2
    assert "cannot read pod file" in err
    assert "No such file" in err
    status, _, err = run(
        ["explain", pod, "--events", write(tmp_path, "e.json", {"kind": "EventList"})], capsys
    )
    assert status == 2
    assert "neither a list of Events nor an EventList" in err
    status, _, err = run(["explain", pod, "--events", write(tmp_path, "e2.json", [1])], capsys)
    assert (status, "item 0 is not an Event object" in err) == (2, True)
    status, _, err = run(["explain", pod, "--policy", write(tmp_path, "p.json", {"grace": {"x": 1}})], capsys)
    assert status == 2
    assert "unknown reason code 'x'" in err
    assert err.count("\n") == 1


def test_bad_elapsed_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pod = write(tmp_path, "pod.json", corpus("succeeded")["pod"])
    for bad in ("-1", "soon", "inf"):
        with pytest.raises(SystemExit) as exit_:
            main(["explain", pod, "--elapsed", bad])
        assert exit_.value.code == 2
        assert "--elapsed" in capsys.readouterr().err


def test_the_real_command_exits_2_on_bad_input(tmp_path: Path) -> None:
    path = write(tmp_path, "pod.json", "not json")
    done = subprocess.run(
        [sys.executable, "-m", "airflow_k8s_retry.cli", "explain", path],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [done.stderr.strip()]
    assert "is not JSON" in done.stderr


def test_pod_from_stdin(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "airflow_k8s_retry.cli", "explain", "-", "--json"],
        input=json.dumps(corpus("oom_killed_main_container")["pod"]),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert json.loads(done.stdout)["reason"] == "container.oom"


def test_the_fix_hint_is_printed_and_in_the_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pod = write(tmp_path, "pod.json", corpus("short_name_no_search_registries_minikube")["pod"])
    _, out, _ = run(["explain", pod], capsys)
    assert "verdict:  FAIL  image.short_name" in out
    assert f"hint:     {hint_for('image.short_name')}" in out
    _, out, _ = run(["explain", pod, "--json"], capsys)
    assert json.loads(out)["hint"] == hint_for("image.short_name")
    assert "trace" not in json.loads(out)


def test_trace_shows_every_rule_considered_before_the_match(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pod = write(tmp_path, "pod.json", corpus("admission_taint_toleration_rejected")["pod"])
    status, out, err = run(["explain", pod, "--trace"], capsys)
    assert (status, err) == (0, "")
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("trace:"))
    assert lines[start].startswith(f"trace:    9 of {len(RULES)} rules considered")
    listed = [line.split()[1] for line in lines[start + 1 :]]
    assert listed == [r.name for r in RULES[:9]]
    assert [line.split()[2] for line in lines[start + 1 :]] == ["no"] * 8 + ["MATCH"]
    # Each line says what the rule looks for, so a reader sees which rule would have had to match.
    assert "status reason `Evicted`" in lines[start + 8]


def test_trace_in_json_names_each_rule_and_whether_it_matched(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    case = corpus("platform_no_matching_manifest_armv7_decayed")
    pod = write(tmp_path, "pod.json", case["pod"])
    events = write(tmp_path, "events.json", case["events"])
    _, out, _ = run(["explain", pod, "--events", events, "--json", "--trace"], capsys)
    result = json.loads(out)
    assert (result["outcome"], result["reason"], result["rule"]) == (
        "fail",
        "image.wrong_platform",
        "image_wrong_platform",
    )
    steps = result["trace"]
    assert [s["rule"] for s in steps] == [r.name for r in RULES[: result["rule_index"] + 1]]
    assert [s["matched"] for s in steps] == [False] * (len(steps) - 1) + [True]
    assert all(s["signal"] == rule_named(s["rule"]).signal for s in steps)
    # Without the Events the decayed status names no cause: a different rule, a different trace.
    _, out, _ = run(["explain", pod, "--json", "--trace"], capsys)
    assert json.loads(out)["trace"][-1]["rule"] == "image_pull_backoff"


#: Queued, provisioning, refused, conflicting and lagging pods: (corpus case, expected verdict).
NEW_CLASSES = [
    "scheduling_gated_an_hour_in_a_kueue_queue",
    "scheduling_gated_past_the_queue_deadline",
    "unschedulable_karpenter_nominated_gpu_nodeclaim",
    "unschedulable_karpenter_nominated_then_refused",
    "unschedulable_scale_up_then_backoff_after_failed_scale_up",
    "signature_validation_failed_decayed_to_back_off",
    "exec_format_error_in_the_termination_message",
    "exec_format_error_in_the_log_of_a_crash_loop",
    "exec_format_error_old_runc_in_the_log",
    "run_as_non_root_non_numeric_image_user",
    "observed_generation_lags_for_long_while_a_resize_runs",
]


@pytest.mark.parametrize("name", NEW_CLASSES)
def test_explain_judges_queued_provisioning_refused_and_lagging_pods_as_the_corpus(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    case = corpus(name)
    argv = ["explain", write(tmp_path, "pod.json", case["pod"]), "--json"]
    argv += ["--events", write(tmp_path, "events.json", case["events"])]
    argv += ["--elapsed", str(case.get("elapsed_seconds", 0))]
    for container, text in (case.get("logs") or {}).items():
        argv += ["--log", f"{container}={write(tmp_path, f'{container}.log', text)}"]
    status, out, err = run(argv, capsys)
    assert (status, err) == (0, "")
    result = json.loads(out)
    assert (result["outcome"], result["reason"]) == (case["expect"]["outcome"], case["expect"]["reason"])
    assert result["hint"] == hint_for(result["reason"])


def test_a_log_without_a_container_is_the_first_containers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    case = corpus("exec_format_error_old_runc_in_the_log")
    pod = write(tmp_path, "pod.json", case["pod"])
    _, out, _ = run(["explain", pod, "--json"], capsys)
    assert json.loads(out)["reason"] == "container.exit_code"  # the pod alone: an exit code
    log = write(tmp_path, "base.log", case["logs"]["base"])
    _, out, _ = run(["explain", pod, "--json", "--log", log], capsys)
    assert json.loads(out)["reason"] == "image.wrong_platform"
    status, _, err = run(["explain", pod, "--log", str(tmp_path / "missing.log")], capsys)
    assert status == 2 and "cannot read log file" in err
