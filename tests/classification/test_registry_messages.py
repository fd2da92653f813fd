"""Registry and runtime wording read into one cause; image names never count as a cause."""

from __future__ import annotations

import pytest

from airflow_k8s_retry.classification import Reason, pull_cause

NOT_FOUND = Reason.IMAGE_NOT_FOUND
UNAUTHORIZED = Reason.IMAGE_UNAUTHORIZED
RATE = Reason.IMAGE_RATE_LIMITED
DOWN = Reason.IMAGE_REGISTRY_UNAVAILABLE


@pytest.mark.parametrize(
    ("message", "cause"),
    [
        # Docker Hub, dockershim and containerd
        (
            "Error response from daemon: manifest for acme/etl:9 not found: "
            "manifest unknown: manifest unknown",
            NOT_FOUND,
        ),
        (
            "pull access denied, repository does not exist or may require authorization: server message: "
            "insufficient_scope: authorization failed",
            NOT_FOUND,
        ),
        (
            "Error response from daemon: pull access denied for acme/etl, "
            "repository does not exist or may require "
            "'docker login': denied: requested access to the resource is denied",
            NOT_FOUND,
        ),
        ("Error response from daemon: unauthorized: authentication required", UNAUTHORIZED),
        (
            "429 Too Many Requests - Server message: toomanyrequests: You have reached your pull rate limit. "
            "You may increase the limit by authenticating and upgrading",
            RATE,
        ),
        # GHCR
        (
            'failed to resolve reference "ghcr.io/a/b:1": failed to authorize: '
            "failed to fetch anonymous token: "
            "unexpected status from GET request to "
            "https://ghcr.io/token?scope=repository%3Aa%2Fb%3Apull: 403 Forbidden",
            UNAUTHORIZED,
        ),
        ('Head "https://ghcr.io/v2/a/b/manifests/1": denied: denied', UNAUTHORIZED),
        (
            "401 Unauthorized - Server message: unauthorized: unauthenticated: User cannot be authenticated",
            UNAUTHORIZED,
        ),
        # ECR
        (
            'Head "https://1.dkr.ecr.us-east-1.amazonaws.com/v2/etl/manifests/1": no basic auth credentials',
            UNAUTHORIZED,
        ),
        ("toomanyrequests: Rate exceeded", RATE),
        # Artifact Registry
        (
            "pulling from host us-docker.pkg.dev failed with status code [manifests 1]: 403 Forbidden",
            UNAUTHORIZED,
        ),
        ("rpc error: code = NotFound desc = failed to pull and unpack image", NOT_FOUND),
        (
            "429 Too Many Requests - Server message: Quota exceeded for quota metric 'Requests per project'",
            RATE,
        ),
        # Quay (CRI-O wording)
        (
            "reading manifest 1 in quay.io/a/b: "
            "unauthorized: access to the requested resource is not authorized",
            UNAUTHORIZED,
        ),
        ("reading manifest 9 in quay.io/a/b: manifest unknown: manifest unknown", NOT_FOUND),
        # transport and server trouble, and the kubelet's own limit
        (
            "unexpected status from HEAD request to https://r.example/v2/a/manifests/1: "
            "503 Service Unavailable",
            DOWN,
        ),
        ("dial tcp: lookup r.example on 10.96.0.10:53: no such host", DOWN),
        ("dial tcp 1.2.3.4:443: i/o timeout", DOWN),
        ("net/http: TLS handshake timeout", DOWN),
        ("dial tcp 1.2.3.4:443: connect: connection refused", DOWN),
        ("pull QPS exceeded.", RATE),
        # apostrophes do not swallow the cause
        ("couldn't pull: manifest unknown", NOT_FOUND),
        # nothing said
        ('Back-off pulling image "docker.io/acme/etl:1"', None),
        ("ErrImagePull", None),
        ("", None),
    ],
)
def test_pull_cause(message: str, cause: Reason | None) -> None:
    assert pull_cause(message) is cause


@pytest.mark.parametrize(
    "image", ["acme/not-found:1", "acme/denied:429", "registry.example/unauthorized:503"]
)
def test_a_quoted_image_reference_is_not_a_cause(image: str) -> None:
    assert pull_cause(f'Back-off pulling image "{image}"') is None
