"""Connections of the cncf ``kubernetes`` type resolve to one cluster description and its clients."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from airflow_k8s_retry.connection import (
    ConnectionConfigError,
    aresolve_cluster_config,
    cluster_config_from_extras,
    kubernetes_hook,
)
from airflow_k8s_retry.kube.config import ClusterConfig, ClusterConfigError, async_api_client


def test_same_cluster_same_way_gives_the_same_key(kubeconfig_file: Path) -> None:
    a = ClusterConfig(kube_config_path=str(kubeconfig_file), source="connection a")
    b = ClusterConfig(kube_config_path=str(kubeconfig_file), source="connection b")
    assert a.key == b.key and hash(a) == hash(b) and a == b
    assert ClusterConfig(kube_config_path=str(kubeconfig_file), cluster_context="other").key != a.key
    assert ClusterConfig(kube_config_path=str(kubeconfig_file), verify_ssl=False).key != a.key


def test_inline_kubeconfig_never_shows_in_key_or_repr(kubeconfig_file: Path) -> None:
    inline = yaml.safe_load(kubeconfig_file.read_text())
    config = ClusterConfig(kube_config=inline)
    assert "token-one" not in config.key and "token-one" not in repr(config)
    assert "kube_config=<hidden>" in repr(config)


def test_two_ways_at_once_is_an_error_naming_both() -> None:
    with pytest.raises(ClusterConfigError, match="kube_config_path and in_cluster are mutually exclusive"):
        ClusterConfig(kube_config_path="/x", in_cluster=True)


async def test_the_worker_and_the_trigger_reach_the_same_server(
    kubeconfig_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker through the provider's ``KubernetesHook``, the trigger through its own loader:
    one connection, one server, one credential."""
    extra = {"kube_config_path": str(kubeconfig_file), "cluster_context": "other"}
    monkeypatch.setenv("AIRFLOW_CONN_K8S_BOTH", json.dumps({"conn_type": "kubernetes", "extra": extra}))
    sync_client = kubernetes_hook("k8s_both").api_client
    config = await aresolve_cluster_config("k8s_both")
    try:
        assert sync_client.configuration.host == "http://127.0.0.1:9"
        assert sync_client.configuration.auth_settings()["BearerToken"]["value"].endswith("token-two")
    finally:
        sync_client.close()
    async_client = await async_api_client(config)
    try:
        assert async_client.configuration.host == "http://127.0.0.1:9"
        assert async_client.configuration.api_key["BearerToken"].endswith("token-two")
    finally:
        await async_client.close()


async def test_default_loading_follows_kubeconfig_env(
    kubeconfig_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig_file))
    client = await async_api_client(ClusterConfig())
    try:
        assert client.configuration.host == "http://127.0.0.1:9"
    finally:
        await client.close()


def test_extras_plain_and_prefixed_forms(kubeconfig_file: Path) -> None:
    plain = cluster_config_from_extras(
        {"kube_config_path": str(kubeconfig_file), "namespace": "jobs", "disable_verify_ssl": "true"},
        conn_id="c",
    )
    prefixed = cluster_config_from_extras(
        {
            "extra__kubernetes__kube_config_path": str(kubeconfig_file),
            "extra__kubernetes__namespace": "jobs",
            "extra__kubernetes__disable_verify_ssl": True,
        },
        conn_id="c",
    )
    assert plain == prefixed
    assert (plain.mode, plain.namespace, plain.verify_ssl) == ("file", "jobs", False)


@pytest.mark.parametrize("as_text", [json.dumps, yaml.safe_dump])
def test_inline_kube_config_as_json_or_yaml_text(kubeconfig_file: Path, as_text: object) -> None:
    inline = yaml.safe_load(kubeconfig_file.read_text())
    config = cluster_config_from_extras({"kube_config": as_text(inline), "cluster_context": "other"})  # type: ignore[operator]
    assert config.mode == "inline" and dict(config.kube_config or {}) == inline


def test_bad_extras_say_what_to_fix_without_echoing_secrets() -> None:
    with pytest.raises(ConnectionConfigError, match="'kube_config' must be a kubeconfig") as caught:
        cluster_config_from_extras({"kube_config": "token: s3cret-value ["}, conn_id="k")
    assert "s3cret" not in str(caught.value)
    with pytest.raises(ConnectionConfigError, match="'in_cluster' must be true or false"):
        cluster_config_from_extras({"in_cluster": "maybe"}, conn_id="k")
    with pytest.raises(ConnectionConfigError, match="fix the extras of connection 'k'"):
        cluster_config_from_extras({"in_cluster": True, "kube_config_path": "/x"}, conn_id="k")


async def test_connection_ids_resolve_like_the_kubernetes_hook(
    kubeconfig_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    extra = {"kube_config_path": str(kubeconfig_file), "namespace": "jobs"}
    monkeypatch.setenv("AIRFLOW_CONN_K8S_WATCHING", json.dumps({"conn_type": "kubernetes", "extra": extra}))
    expected = ClusterConfig(kube_config_path=str(kubeconfig_file), namespace="jobs")
    assert await aresolve_cluster_config("k8s_watching") == expected
    # None and an absent kubernetes_default fall back to default loading; another absent id is an error.
    assert (await aresolve_cluster_config(None)).mode == "default"
    assert (await aresolve_cluster_config("kubernetes_default")).mode == "default"
    with pytest.raises(Exception, match="isn't defined"):
        await aresolve_cluster_config("no_such_connection")
