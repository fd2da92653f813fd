"""The pod of a finished try is deleted even when the API server refuses connections for about
20 s (a restart): on a last try nothing else would delete it. The soak leaked such a pod when the
delete gave up after 3.5 s (a missing-Secret task with no retries, kube-apiserver restarting as
its resumed worker finished)."""

from __future__ import annotations

from typing import Any, cast

from airflow_k8s_retry.classification.model import Outcome, Reason, Verdict
from airflow_k8s_retry.kube.errors import KubeError
from airflow_k8s_retry.kube.pods import CreatedPod, Ending, PodClient, finish


class RestartingApiServer:
    """The two calls ``finish`` makes, refused until ``down_for`` seconds of the caller's sleeps
    have passed (a connection refused surfaces as a KubeError from the real client)."""

    def __init__(self, down_for: float) -> None:
        self.down_for = down_for
        self.slept = 0.0
        self.deleted: list[str] = []

    def sleep(self, seconds: float) -> None:
        self.slept += seconds

    def _up(self) -> None:
        if self.slept < self.down_for:
            raise KubeError(
                "HTTPSConnectionPool(host='127.0.0.1'): Max retries exceeded (Connection refused)"
            )

    def stamp_verdict(self, namespace: str, name: str, uid: str, stamp: str) -> bool:
        self._up()
        return True

    def delete(self, namespace: str, name: str, uid: str, *, grace_period_seconds: int | None = None) -> bool:
        self._up()
        self.deleted.append(uid)
        return True


def _finish(server: RestartingApiServer) -> Ending:
    pod = CreatedPod(name="t005-missing-secret-1-t1", namespace="default", uid="u-1", adopted=True, body={})
    verdict = Verdict(Outcome.RETRY, Reason("config.missing_secret"), "secret not found", rule="r")
    logged: list[Any] = []
    return finish(
        cast(PodClient, server), pod, verdict, kept=False, log=lambda *a: logged.append(a), sleep=server.sleep
    )


def test_a_20_second_refusal_still_ends_in_the_delete() -> None:
    server = RestartingApiServer(down_for=20)
    assert _finish(server) is Ending.DELETED
    assert server.deleted == ["u-1"]


def test_an_api_server_that_stays_down_leaves_the_pod_after_about_30_seconds() -> None:
    server = RestartingApiServer(down_for=10_000)
    assert _finish(server) is Ending.LEFT
    assert server.deleted == []
    assert 30 <= server.slept <= 40  # the stamp's 3.5 s, then the delete's 30.5 s
