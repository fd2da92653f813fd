"""API errors at create are judged by the Status's code and message: transient ones cost a try
(after in-process retries), the ones another try would meet again fail the task at once.

The messages are the API server's own wording for each case (ResourceQuota and LimitRange
admission, PodSecurity admission, RBAC, validation).
"""

from __future__ import annotations

import json

import pytest
import urllib3
from kubernetes.client.exceptions import ApiException

from airflow_k8s_retry.classification.model import Outcome, Reason
from airflow_k8s_retry.kube.errors import translate
from airflow_k8s_retry.kube.pods import create_error_outcome, create_error_verdict


def status(code: int, reason: str, message: str) -> ApiException:
    exc = ApiException(status=code, reason=reason)
    exc.body = json.dumps(
        {
            "kind": "Status",
            "apiVersion": "v1",
            "status": "Failure",
            "code": code,
            "reason": reason,
            "message": message,
        }
    )
    return exc


CASES = [
    (
        "quota",
        status(
            403,
            "Forbidden",
            'pods "etl-load-t1" is forbidden: exceeded quota: compute, requested: '
            "limits.cpu=2, used: limits.cpu=10, limited: limits.cpu=10",
        ),
        Outcome.RETRY,
        Reason.API_QUOTA_EXCEEDED,
    ),
    (
        "rbac",
        status(
            403,
            "Forbidden",
            'pods is forbidden: User "system:serviceaccount:airflow:worker" cannot '
            'create resource "pods" in API group "" in the namespace "jobs"',
        ),
        Outcome.FAIL,
        Reason.API_REJECTED,
    ),
    (
        "pod security",
        status(
            403,
            "Forbidden",
            'pods "etl-load-t1" is forbidden: violates PodSecurity '
            '"restricted:latest": allowPrivilegeEscalation != false',
        ),
        Outcome.FAIL,
        Reason.API_REJECTED,
    ),
    (
        "limit range",
        status(
            403,
            "Forbidden",
            'pods "etl-load-t1" is forbidden: maximum cpu usage per Container is 2, but limit is 4',
        ),
        Outcome.FAIL,
        Reason.API_REJECTED,
    ),
    (
        "invalid",
        status(
            422,
            "Invalid",
            'Pod "etl-load-t1" is invalid: spec.containers[0].name: Invalid value: "Not_A_Name"',
        ),
        Outcome.FAIL,
        Reason.API_REJECTED,
    ),
    (
        "namespace",
        status(404, "NotFound", 'namespaces "does-not-exist" not found'),
        Outcome.FAIL,
        Reason.API_REJECTED,
    ),
    ("unauthorized", status(401, "Unauthorized", "Unauthorized"), Outcome.RETRY, Reason.API_UNAUTHORIZED),
    (
        "conflict",
        status(409, "AlreadyExists", 'pods "etl-load-t1" already exists'),
        Outcome.RETRY,
        Reason.API_CONFLICT,
    ),
    (
        "throttled",
        status(429, "TooManyRequests", "Too many requests, please try again later."),
        Outcome.RETRY,
        Reason.API_UNAVAILABLE,
    ),
    (
        "server error",
        status(500, "InternalError", "Internal error occurred: etcdserver: request timed out"),
        Outcome.RETRY,
        Reason.API_UNAVAILABLE,
    ),
    (
        "unavailable",
        status(503, "ServiceUnavailable", "the server is currently unable to handle the request"),
        Outcome.RETRY,
        Reason.API_UNAVAILABLE,
    ),
    (
        "an unexpected answer",
        status(410, "Expired", "The provided continue parameter is too old"),
        Outcome.RETRY,
        Reason.API_UNAVAILABLE,
    ),
    (
        "no answer",
        urllib3.exceptions.ProtocolError("Connection aborted.", ConnectionResetError(104, "reset")),
        Outcome.RETRY,
        Reason.API_UNAVAILABLE,
    ),
]


@pytest.mark.parametrize(("case", "exc", "outcome", "reason"), CASES, ids=[c[0] for c in CASES])
def test_create_errors_are_judged_by_status_and_message(case, exc, outcome, reason):
    assert create_error_outcome(translate(exc)) == (outcome, reason)
    verdict = create_error_verdict(translate(exc), "jobs", "etl-load-t1")
    assert (verdict.outcome, verdict.reason) == (outcome, reason)
    assert "\n" not in verdict.message and "jobs/etl-load-t1" in verdict.message


def test_termination_messages_are_withheld_from_what_is_published():
    from airflow_k8s_retry.classification import classify
    from airflow_k8s_retry.report import withhold_termination_messages

    secret_tail = "Traceback ... password=hunter2-s3cret"
    pod = {
        "metadata": {"name": "p", "namespace": "default", "uid": "u"},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "base", "image": "x"}]},
        "status": {
            "phase": "Failed",
            "containerStatuses": [
                {
                    "name": "base",
                    "state": {"terminated": {"exitCode": 1, "reason": "Error", "message": secret_tail}},
                }
            ],
        },
    }
    verdict = classify(pod, now=0.0)
    assert secret_tail in verdict.message  # the classifier quotes it ...
    published = withhold_termination_messages(verdict, pod)
    text = json.dumps(published.to_payload())
    assert "hunter2" not in text and "<termination message withheld>" in published.message  # ... we don't
    assert (published.outcome, published.reason) == (verdict.outcome, verdict.reason)
    assert withhold_termination_messages(verdict, None) is verdict


def test_a_wrong_ca_fails_at_once_in_one_line(context, tmp_path, monkeypatch):
    """A certificate that does not verify against the connection's CA is a configuration error: no
    retry can fix it, so it is not ridden out as 'no answer' (review finding R3-9)."""
    import yaml

    from airflow_k8s_retry.exceptions import PodFailurePermanent
    from airflow_k8s_retry.operators import RetryingPodOperator
    from airflow_k8s_retry_testing import FakeCluster

    with FakeCluster(tls=True) as served, FakeCluster(tls=True) as other:
        config = yaml.safe_load(served.kubeconfig.read_text())
        theirs = yaml.safe_load(other.kubeconfig.read_text())
        config["clusters"][0]["cluster"]["certificate-authority-data"] = theirs["clusters"][0]["cluster"][
            "certificate-authority-data"
        ]
        wrong = tmp_path / "wrong-ca.yaml"
        wrong.write_text(yaml.safe_dump(config))
        monkeypatch.setenv("KUBECONFIG", str(wrong))
        op = RetryingPodOperator(
            task_id="load", image="busybox:1.36", kubernetes_conn_id=None, namespace="default"
        )
        with pytest.raises(PodFailurePermanent) as failure:
            op.execute(context)
        assert failure.value.reason == "api.tls_error"
        assert "CERTIFICATE_VERIFY_FAILED" in str(failure.value) and "\n" not in str(failure.value)
        assert served.pods() == [] and other.pods() == []


@pytest.mark.fake_cluster(time_scale=0.05)
def test_a_non_string_env_value_is_refused_by_the_api_and_fails_at_once(fake_cluster, context):
    """``env_vars={"N": 5}`` reaches the API as a number; kube-apiserver's decoder answers 400 and
    the simulator does the same, so an offline test no longer passes a DAG that fails in
    production (review finding R3-10)."""
    from airflow_k8s_retry.exceptions import PodFailurePermanent
    from airflow_k8s_retry.operators import RetryingPodOperator

    op = RetryingPodOperator(
        task_id="load", image="busybox:1.36", kubernetes_conn_id=None, namespace="default", env_vars={"N": 5}
    )
    with pytest.raises(PodFailurePermanent) as failure:
        op.execute(context)
    assert failure.value.reason == "api.rejected"
    assert (
        "cannot unmarshal number into Go struct field EnvVar.spec.containers.env.value of type string"
        in str(failure.value)
    )
    assert fake_cluster.all_pods() == []
