"""Registry and runtime wording read into one cause; image names never count as a cause."""

from __future__ import annotations

import pytest

from airflow_k8s_retry.classification import Reason, pull_cause

NOT_FOUND = Reason.IMAGE_NOT_FOUND
UNAUTHORIZED = Reason.IMAGE_UNAUTHORIZED
RATE = Reason.IMAGE_RATE_LIMITED
DOWN = Reason.IMAGE_REGISTRY_UNAVAILABLE
TLS = Reason.IMAGE_TLS_ERROR
PLATFORM = Reason.IMAGE_WRONG_PLATFORM
SHORT = Reason.IMAGE_SHORT_NAME


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
        # TLS and certificates: configuration, not an outage
        ('Get "https://registry-1.docker.io/v2/": x509: certificate signed by unknown authority', TLS),
        (
            "tls: failed to verify certificate: x509: certificate has expired or is not yet valid: "
            "current time 2025-06-12T03:05:25Z is after 2025-06-07T05:48:45Z",
            TLS,
        ),
        ("x509: certificate is valid for GATEWAY.SPANSERVICES.COM, not registry-1.docker.io", TLS),
        (
            'Head "https://localhost:7439/v2/a/manifests/1": http: server gave HTTP response to HTTPS client',
            TLS,
        ),
        # dockershim quotes the daemon's JSON: the quoted text with spaces is the message, not an image
        (
            'Error response from daemon: {"message":"Get https://10.78.0.228:5000/v1/_ping: '
            'x509: certificate signed by unknown authority"}',
            TLS,
        ),
        ('with ErrImagePull: "net/http: request canceled"', DOWN),
        # wrong platform: "not found" in containerd's wording must not make it a missing image
        (
            'failed to pull and unpack image "ghcr.io/a/b:1": no match for platform in manifest: not found',
            PLATFORM,
        ),
        ("no matching manifest for linux/arm64/v8 in the manifest list entries", PLATFORM),
        (
            "Error choosing image instance: no image found in manifest list for architecture arm64",
            PLATFORM,
        ),
        # CRI-O short names
        (
            'short-name "busybox:latest" did not resolve to an alias and no unqualified-search registries '
            'are defined in "/etc/containers/registries.conf"',
            SHORT,
        ),
        ("short name mode is enforcing, but image name alpine:latest returns ambiguous list", SHORT),
        ("no registries configured while trying to pull an unqualified image, add at least one", SHORT),
        # transport failures worded as a cancellation
        ("rpc error: code = Canceled desc = context canceled", DOWN),
        ("rpc error: code = 2 desc = net/http: request canceled", DOWN),
        ("net/http: request canceled while waiting for connection (Client.Timeout exceeded)", DOWN),
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
