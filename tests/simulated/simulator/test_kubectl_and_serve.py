"""kubectl against the simulator's kubeconfig, and the foreground ``serve()`` entry point."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import kubernetes
import pytest

from airflow_k8s_retry_testing import FakeCluster
from tests.simulated.simulator.pods import pod_body

KUBECTL = shutil.which("kubectl")
needs_kubectl = pytest.mark.skipif(
    KUBECTL is None and not os.environ.get("CI"),
    reason="kubectl (Debian's kubernetes-client) is not installed; under CI this test must run",
)


@needs_kubectl
def test_kubectl_get_pods_watch_shows_the_lifecycle() -> None:
    assert KUBECTL is not None, "kubectl is required when CI is set"
    scenario = {
        "images": {"ghost:1": {"pull": "not_found"}, "example.com/long:1": {"run": {"duration_seconds": 600}}}
    }
    with FakeCluster(scenario, time_scale=0.02, tls=True) as cluster:
        api = kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(str(cluster.kubeconfig)))
        api.create_namespaced_pod("default", pod_body("early"))
        assert cluster.wait_for(lambda c: (c.pod("early") or {})["status"]["phase"] == "Succeeded", 5)
        watcher = subprocess.Popen(
            [KUBECTL, "--kubeconfig", str(cluster.kubeconfig), "get", "pods", "-w", "--request-timeout=0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert watcher.stdout is not None
            header = watcher.stdout.readline()
            assert header.split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
            assert watcher.stdout.readline().split()[:3] == ["early", "0/1", "Completed"]
            api.create_namespaced_pod("default", pod_body("ghost", "ghost:1"))
            statuses = []
            while "ImagePullBackOff" not in statuses:
                line = watcher.stdout.readline()
                assert line, f"kubectl stopped: {watcher.stderr.read() if watcher.stderr else ''}"
                fields = line.split()
                assert fields[0] == "ghost"
                statuses.append(fields[2])
            assert statuses[0] == "Pending" and "ErrImagePull" in statuses
        finally:
            watcher.terminate()
            watcher.wait(timeout=10)
        listed = subprocess.run(
            [
                KUBECTL,
                "--kubeconfig",
                str(cluster.kubeconfig),
                "get",
                "events",
                "--field-selector",
                "involvedObject.name=ghost",
            ],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        assert "Back-off pulling image" in listed.stdout
        logs = subprocess.run(
            [KUBECTL, "--kubeconfig", str(cluster.kubeconfig), "logs", "ghost"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert logs.returncode != 0
        api.create_namespaced_pod("default", pod_body("shell", "example.com/long:1"))
        assert cluster.wait_for(lambda c: (c.pod("shell") or {})["status"]["phase"] == "Running", 5)
        said = subprocess.run(
            [KUBECTL, "--kubeconfig", str(cluster.kubeconfig), "exec", "-i", "shell", "--", "sh"],
            input="echo hello\nexit 3\n",
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert (said.returncode, said.stdout) == (3, "hello\n")
        # The kubelet keeps retrying, so the waiting reason alternates between the two.
        assert re.search(
            r'container "base" in pod "ghost" is waiting to start: (ErrImagePull|ImagePullBackOff)',
            logs.stderr,
        )


def test_serve_runs_until_sigterm(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    audit = tmp_path / "audit.jsonl"
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text("images:\n  ghost:1:\n    pull: not_found\ntime_scale: 0.01\n")
    code = textwrap.dedent(
        f"""
        import sys
        from airflow_k8s_retry_testing.serve import serve
        sys.exit(serve({str(scenario)!r}, 0, {str(kubeconfig)!r}, {str(audit)!r}))
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.startswith("FakeCluster serving at https://127.0.0.1:"), (
            proc.stderr.read() if proc.stderr else ""
        )
        api = kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(str(kubeconfig)))
        api.create_namespaced_pod("default", pod_body("served"))
        assert api.read_namespaced_pod("served", "default").metadata.name == "served"
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    assert '"verb":"create"' in audit.read_text()


def test_serve_rejects_a_bad_scenario(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from airflow_k8s_retry_testing.serve import serve

    bad = tmp_path / "bad.yaml"
    bad.write_text("imagez: {}\n")
    assert serve(str(bad)) == 2
    assert "unknown key 'imagez'" in capsys.readouterr().err


def test_a_taken_port_is_a_clear_error() -> None:
    with FakeCluster() as first, pytest.raises(RuntimeError, match=f"could not start on port {first.port}"):
        FakeCluster(port=first.port).start()
