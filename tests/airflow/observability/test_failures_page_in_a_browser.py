"""The failures page, end to end: real ``airflow dags test`` runs leave verdict XComs, a real
``airflow api-server`` loads the plugin from the package's entry point, and headless Chromium
(Debian's ``chromium``) renders the page behind Airflow's own login. The test reads what the page
rendered and saves a screenshot (``.artifacts/failures-page.png``, or
``$AIRFLOW_K8S_RETRY_ARTIFACTS``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from airflow_k8s_retry.classification import hint_for
from airflow_k8s_retry_testing import FakeCluster
from airflow_k8s_retry_testing.ports import free_port
from tests.support.browser import Chromium, chromium_path
from tests.support.paths import REPO
from tests.support.scenarios import DAG_HEADER
from tools.airflow_runner import AIRFLOW, AirflowHome, MigratedDatabase

pytestmark = [
    pytest.mark.skipif(chromium_path() is None, reason="needs Debian's chromium (make tools installs it)"),
]

ARTIFACTS = Path(os.environ.get("AIRFLOW_K8S_RETRY_ARTIFACTS", REPO / ".artifacts"))
PASSWORD = "failures-page-test"
DAGS = (
    DAG_HEADER
    + """

with DAG(dag_id="failures_a", schedule=None, start_date=datetime(2024, 1, 1)):
    RetryingPodOperator(task_id="exits", image="example.com/app:broken", retries=0)
    RetryingPodOperator(task_id="bad_name", image="registry.example.com/Team/App:1", retries=0)
    RetryingPodOperator(
        task_id="missing",
        image="registry.example.com/team/missing:1",
        retries=0,
        failure_policy=FailurePolicy(grace={"image.not_found": 2}),
    )

with DAG(dag_id="failures_b", schedule=None, start_date=datetime(2024, 1, 1)):
    RetryingPodOperator(task_id="exits", image="example.com/app:broken", retries=0)
    RetryingPodOperator(task_id="ok", image="example.com/app:ok")
"""
)
CLUSTER: dict[str, Any] = {
    "time_scale": 0.1,
    "images": {
        "example.com/app:broken": {"run": {"exit_code": 3, "duration_seconds": 2, "log": "boom"}},
        "registry.example.com/Team/App:1": {"pull": "invalid_name"},
        "registry.example.com/team/missing:1": {"pull": "not_found"},
        "example.com/app:ok": {"run": {"duration_seconds": 2}},
    },
}


@dataclass
class Site:
    base: str
    token: str
    home: AirflowHome
    env: dict[str, str]

    def get(
        self, path: str, *, token: str | None = None, accept: str = "application/json"
    ) -> tuple[int, Any]:
        headers = {"Accept": accept}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        request = urllib.request.Request(self.base + path, headers=headers)
        opener = urllib.request.build_opener(NoRedirect)
        try:
            with opener.open(request, timeout=30) as response:
                body = response.read()
                return response.status, json.loads(body) if "json" in response.headers.get(
                    "content-type", ""
                ) else body
        except urllib.error.HTTPError as exc:
            return exc.code, exc.headers


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


@pytest.fixture(scope="module")
def site(migrated_database: MigratedDatabase, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    root = tmp_path_factory.mktemp("failures-page")
    dags = root / "dags"
    dags.mkdir()
    (dags / "failures.py").write_text(DAGS)
    home = AirflowHome.create(root / "home", dags_folder=dags, database=migrated_database)
    with FakeCluster(scenario=CLUSTER) as cluster:
        runs = ("failures_a", "failures_a", "failures_b")
        for result in home.run_dags(runs, kubeconfig=cluster.kubeconfig, timeout=600):
            assert result.returncode in (0, 1), result.output[-3000:]
    port = free_port()
    passwords = root / "passwords.json"
    passwords.write_text(json.dumps({"admin": PASSWORD}))
    env = home.env(
        extra={
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(port),
            "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
            "AIRFLOW__API_AUTH__JWT_SECRET": "failures-page-test-" + os.urandom(8).hex(),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
        }
    )
    log = (root / "api-server.log").open("wb")
    proc = subprocess.Popen(
        [AIRFLOW, "api-server", "--port", str(port), "--host", "127.0.0.1", "--workers", "1"],
        env=env,
        cwd=home.home,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        token = None
        while token is None:
            assert proc.poll() is None, (root / "api-server.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "api-server did not start in 120 s"
            with contextlib.suppress(OSError):
                request = urllib.request.Request(
                    base + "/auth/token",
                    data=json.dumps({"username": "admin", "password": PASSWORD}).encode(),
                    headers={"Content-Type": "application/json"},
                    method="POST",
                )
                with urllib.request.urlopen(request, timeout=5) as response:
                    token = json.loads(response.read())["access_token"]
            time.sleep(0.5)
        yield Site(base, token, home, env)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_airflow_lists_the_plugin_from_the_entry_point(site: Site) -> None:
    proc = subprocess.run(
        [AIRFLOW, "plugins", "--output", "json"],
        env=site.env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    plugins = {p["name"]: p for p in json.loads(proc.stdout[proc.stdout.index("[") :])}
    ours = plugins["airflow_k8s_retry"]
    assert "airflow_k8s_retry.plugins.airflow_plugin:K8sRetryPlugin" in str(ours["source"])
    assert "/k8s-retry" in str(ours["fastapi_apps"])


def test_the_ui_gets_a_navigation_link(site: Site) -> None:
    status, body = site.get("/api/v2/plugins", token=site.token)
    assert status == 200
    views = [v for p in body["plugins"] for v in p["external_views"]]
    assert {
        "name": "Kubernetes pod failures",
        "href": "k8s-retry/",
        "destination": "nav",
        "category": "browse",
        "url_route": "k8s-retry",
    }.items() <= next(v for v in views if v["name"] == "Kubernetes pod failures").items()


def test_the_page_is_behind_airflows_authentication(site: Site) -> None:
    status, _ = site.get("/k8s-retry/api/failures")
    assert status == 401
    status, headers = site.get("/k8s-retry/", accept="text/html")
    assert status == 307
    assert headers["location"].startswith("/auth/login") and "k8s-retry" in headers["location"]
    status, _ = site.get("/k8s-retry/api/failures", token="not-a-token")
    assert status == 403
    status, body = site.get("/k8s-retry/api/failures", token=site.token)
    assert status == 200 and body["failures"] == 7


def test_the_page_renders_real_verdicts_in_a_browser(site: Site, tmp_path: Path) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with Chromium.start(tmp_path / "profile") as browser:
        browser.set_cookie("_token", site.token, site.base)
        browser.navigate(site.base + "/k8s-retry/?hours=1")
        browser.wait_for("document.querySelector('#tries') !== null")
        seen = browser.evaluate(
            """(() => ({
                title: document.querySelector('h1').innerText,
                total: document.querySelector('#total').innerText,
                bars: [...document.querySelectorAll('#chart rect.bar')].map(
                    b => [b.dataset.reason, +b.dataset.count]),
                legend: document.querySelector('.legend').innerText,
                top: [...document.querySelectorAll('#top-tasks tr.top-task')].map(r => r.innerText),
                tries: [...document.querySelectorAll('#tries tr.failure')].map(
                    r => [...r.querySelectorAll('td')].map(td => td.innerText)),
                hints: document.querySelectorAll('#tries .hint').length,
                dags: [...document.querySelectorAll('#dag_id option')].map(o => o.value),
            }))()"""
        )
        browser.screenshot(ARTIFACTS / "failures-page.png")
        browser.navigate(site.base + "/k8s-retry/?hours=1&dag_id=failures_b")
        browser.wait_for("document.querySelector('#tries') !== null")
        only_b = browser.evaluate(
            "[...document.querySelectorAll('#tries tr.failure')]"
            ".map(r => r.querySelectorAll('td')[1].innerText)"
        )
        total_b = browser.evaluate("document.querySelector('#total').innerText")

    # failures_a ran twice (three failing tasks), failures_b once (one failing task, one success).
    assert seen["title"] == "Kubernetes pod failures"
    assert seen["total"] == "7"
    by_reason: dict[str, int] = {}
    for reason, count in seen["bars"]:
        by_reason[reason] = by_reason.get(reason, 0) + count
    assert by_reason == {"container.exit_code": 3, "image.invalid_name": 2, "image.not_found": 2}
    assert "container.exit_code (3)" in seen["legend"]
    assert [row.rsplit("\t", 1)[0] for row in seen["top"]] == [
        "failures_a.bad_name\t2\timage.invalid_name (2)",
        "failures_a.exits\t2\tcontainer.exit_code (2)",
        "failures_a.missing\t2\timage.not_found (2)",
        "failures_b.exits\t1\tcontainer.exit_code (1)",
    ]
    assert len(seen["tries"]) == 7
    for row in seen["tries"]:
        task, try_number, pod, outcome, reason, message = row[1], row[2], row[3], row[4], row[5], row[6]
        assert try_number == "1"
        dag, task_id = task.split("\n")[0].split(".")
        assert pod.startswith(f"default/{dag.replace('_', '-')}-{task_id.replace('_', '-')}-"), pod
        assert outcome == ("fail" if reason == "image.invalid_name" else "retry")
        assert message
    exit_row = next(r for r in seen["tries"] if r[5] == "container.exit_code")
    assert "exit code 3" in exit_row[6]
    missing_row = next(r for r in seen["tries"] if r[5] == "image.not_found")
    assert "past its grace of 2s" in missing_row[6]
    # Every reason code has a fix hint, shown under the message.
    assert seen["hints"] == 7
    for row in seen["tries"]:
        hint = hint_for(row[5])
        assert hint and row[6].endswith(f"fix: {hint}")
    assert seen["dags"] == ["", "failures_a", "failures_b"]
    assert total_b == "1" and len(only_b) == 1 and only_b[0].startswith("failures_b.exits")


def test_the_ui_navigation_opens_the_page_inside_airflow(site: Site, tmp_path: Path) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with Chromium.start(tmp_path / "profile") as browser:
        browser.set_cookie("_token", site.token, site.base)
        browser.navigate(site.base + "/")
        browse = "[...document.querySelectorAll('button')].find(b => b.innerText.trim() === 'Browse')"
        browser.wait_for(f"!!{browse}", 60)
        browser.evaluate(f"{browse}.click()")
        link = (
            "[...document.querySelectorAll('a')].find(a => a.innerText.includes('Kubernetes pod failures'))"
        )
        assert browser.wait_for(f"{link} && {link}.getAttribute('href')") == "/plugin/k8s-retry"
        browser.evaluate(f"{link}.click()")
        src = browser.wait_for("document.querySelector('iframe') && document.querySelector('iframe').src", 30)
        assert src == site.base + "/k8s-retry/"
        # The frame is same-origin: read what it rendered once its tables are there.
        frame = "document.querySelector('iframe').contentDocument"
        browser.wait_for(f"{frame} && {frame}.querySelector('#tries') !== null", 30)
        assert browser.evaluate(f"{frame}.querySelector('#total').innerText") == "7"
        browser.screenshot(ARTIFACTS / "failures-page-in-ui.png", full_page=False)
