"""The simulator's pytest plugin, as a DAG author's test suite meets it: loaded from the installed
distribution's entry point (no conftest, no ``-p``), a ready ``fake_cluster`` that the real
``kubernetes`` client reaches through ``KUBECONFIG``, its scenario from a marker, and nothing left
running after the test."""

from __future__ import annotations

import pytest

pytest_plugins = ("pytester",)

AUTHORS_TESTS = """
import json, os

import kubernetes
import pytest


def client():
    return kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(os.environ["KUBECONFIG"]))


def test_default_cluster_is_reachable_through_the_environment(fake_cluster):
    assert os.environ["KUBECONFIG"] == str(fake_cluster.kubeconfig)
    connection = json.loads(os.environ["AIRFLOW_CONN_KUBERNETES_DEFAULT"])
    assert connection["extra"] == {"kube_config_path": str(fake_cluster.kubeconfig)}
    assert [n.metadata.name for n in client().list_node().items] == ["fake-node-1"]


@pytest.mark.fake_cluster("image_pull_failures", time_scale=0.01)
def test_a_shipped_scenario_by_name(fake_cluster):
    assert fake_cluster.time_scale == 0.01
    assert "registry.example.com/team/missing:1.0" in fake_cluster.scenario.images


@pytest.mark.fake_cluster({"secrets": [{"name": "db", "namespace": "default", "data": {"password": "x"}}]})
def test_a_scenario_as_a_dict(fake_cluster):
    secret = client().read_namespaced_secret("db", "default")
    assert secret.metadata.name == "db"


def exiting(code):
    scenario = {"images": {"app:1": {"run": {"exit_code": code}}}}
    return pytest.param(code, marks=pytest.mark.fake_cluster(scenario, time_scale=0.5))


@pytest.mark.parametrize("code", [exiting(0), exiting(3)])
def test_each_case_its_own_scenario(fake_cluster, code):
    assert fake_cluster.scenario.images["app:1"].run.exit_code == code and fake_cluster.time_scale == 0.5


def test_two_clusters_from_the_factory(make_fake_cluster):
    one, two = make_fake_cluster(), make_fake_cluster(time_scale=0.5)
    assert one.url != two.url and two.time_scale == 0.5


@pytest.mark.fake_cluster("no_such_scenario")
def test_an_unknown_scenario_name(fake_cluster):
    pass
"""


def test_an_authors_suite_gets_a_ready_cluster_from_the_entry_point(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_dag=AUTHORS_TESTS)

    result = pytester.runpytest(
        "-p", "no:cacheprovider", "-o", "asyncio_default_fixture_loop_scope=function", "-v"
    )

    result.assert_outcomes(passed=6, errors=1)
    result.stdout.fnmatch_lines(["plugins:*airflow-k8s-retry-testing-0.1.0*"])
    result.stdout.fnmatch_lines(
        ["*no shipped scenario named 'no_such_scenario'; choose one of: capacity, config_errors, *healthy*"]
    )


def test_every_cluster_the_plugin_started_is_stopped(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_leak="""
import urllib.request

import pytest

seen = []


def test_start(fake_cluster, make_fake_cluster):
    seen.extend([fake_cluster.url, make_fake_cluster().url])


def test_after():
    for url in seen:
        with pytest.raises(OSError):
            urllib.request.urlopen(url + "/version", timeout=2)
"""
    )

    result = pytester.runpytest("-p", "no:cacheprovider", "-o", "asyncio_default_fixture_loop_scope=function")

    result.assert_outcomes(passed=2)
