"""Read an image-pull error message and say what the registry meant.

Kubelets, container runtimes and registries word the same failure in many ways (dockershim's
"Error response from daemon", containerd's "failed to pull and unpack image", Docker Hub,
GHCR, ECR, Artifact Registry and Quay each with their own text), and the kubelet later replaces
the useful text with the generic "Back-off pulling image". This module turns one message into one
cause, and ranks causes so that the strongest one seen can stand in for a decayed message.

Docker Hub answers an anonymous pull of a private repository and a pull of a repository that does
not exist with the same sentence ("pull access denied, repository does not exist or may require
authorization"). That sentence is read as *not found*: a wrong name is the more common cause, both
causes get a short confirmation grace and then a retry, and the verdict message names both
possibilities so the reader checks the image name and the pull secret.
"""

from __future__ import annotations

import re

from airflow_k8s_retry.classification.model import Reason

# Checked in this order: the first family with a match names the cause.
#: The node's image policy refused the image: CRI-O's signature policy (the kubelet's
#: ``SignatureValidationFailed`` since 1.28; containers/image's "Source image rejected: ..." before
#: CRI-O used that code) or a containerd 2 image verifier plugin ("image verifier X blocked pull").
_POLICY = re.compile(
    r"signaturevalidationfailed|signature validation failed|source image rejected"
    r"|image verifier \S+ blocked pull",
)
#: The image exists, but not for this node's platform (containerd, dockershim/moby, CRI-O wording).
_WRONG_PLATFORM = re.compile(
    r"no match for platform in manifest|no matching manifest for \S+ in the manifest list"
    r"|no image found in manifest list for architecture|does not match the specified platform",
)
#: CRI-O (containers/image) refuses an unqualified name: no alias, no or ambiguous search registries.
_SHORT_NAME = re.compile(
    r"short-name .*did not resolve to an alias|short name mode is enforcing"
    r"|short-name resolution enforced|no registries configured while trying to pull an unqualified image",
)
_RATE_LIMITED = re.compile(
    r"toomanyrequests|too many requests|\b429\b|rate limit|rate exceeded|pull qps exceeded"
    r"|quota exceeded|exceeded .*quota",
)
#: Certificates and TLS set-up: the node or the registry is misconfigured (not a transient fault).
_TLS = re.compile(
    r"x509:|certificate signed by unknown authority|certificate has expired|certificate is not valid"
    r"|certificate is valid for|tls: failed to verify|remote error: tls:|tls: handshake failure"
    r"|server gave http response to https client|first record does not look like a tls handshake",
)
_UNAVAILABLE = re.compile(
    r"\b50[0-4]\b|internal server error|bad gateway|service unavailable|gateway timeout"
    r"|i/o timeout|timeout exceeded|timed out|deadline exceeded|tls handshake timeout"
    r"|connection refused|connection reset|no such host|network is unreachable|no route to host"
    r"|temporary failure in name resolution|server misbehaving|unexpected eof"
    r"|request canceled|context canceled",
)
_NOT_FOUND = re.compile(
    r"manifest unknown|not found|repository does not exist|name unknown|no such image"
    r"|does not exist|name_unknown|manifest_unknown|code = notfound",
)
_UNAUTHORIZED = re.compile(
    r"unauthorized|denied|authentication required|\b401\b|\b403\b|forbidden"
    r"|no basic auth credentials|authorization failed|invalid username/password"
    r"|insufficient_scope|not authorized",
)

_FAMILIES: tuple[tuple[Reason, re.Pattern[str]], ...] = (
    (Reason.IMAGE_POLICY_REFUSED, _POLICY),
    (Reason.IMAGE_WRONG_PLATFORM, _WRONG_PLATFORM),
    (Reason.IMAGE_SHORT_NAME, _SHORT_NAME),
    (Reason.IMAGE_RATE_LIMITED, _RATE_LIMITED),
    (Reason.IMAGE_TLS_ERROR, _TLS),
    (Reason.IMAGE_REGISTRY_UNAVAILABLE, _UNAVAILABLE),
    (Reason.IMAGE_NOT_FOUND, _NOT_FOUND),
    (Reason.IMAGE_UNAUTHORIZED, _UNAUTHORIZED),
)

#: How strongly a cause speaks about the image itself (higher wins when messages decay): a
#: definitive answer about the image beats a transient complaint about the transport.
CAUSE_RANK: dict[Reason, int] = {
    Reason.IMAGE_PULL_BACKOFF: 0,
    Reason.IMAGE_REGISTRY_UNAVAILABLE: 1,
    Reason.IMAGE_RATE_LIMITED: 2,
    Reason.IMAGE_TLS_ERROR: 3,
    Reason.IMAGE_UNAUTHORIZED: 4,
    Reason.IMAGE_NOT_FOUND: 5,
    Reason.IMAGE_SHORT_NAME: 6,
    Reason.IMAGE_WRONG_PLATFORM: 7,
    Reason.IMAGE_POLICY_REFUSED: 8,
}


def pull_cause(message: str) -> Reason | None:
    """Return the cause a pull error message states, or ``None`` when it states none.

    Example:
        >>> pull_cause('failed to resolve reference "ghcr.io/acme/app:1": ghcr.io/acme/app:1: not found')
        <Reason.IMAGE_NOT_FOUND: 'image.not_found'>
        >>> pull_cause('Back-off pulling image "ghcr.io/acme/app:1"') is None
        True
    """
    # Newer kubelets append the last error to the back-off text ('Back-off pulling image "x":
    # ErrImagePull: <cause>'), so the whole message is read, minus quoted image references.
    text = _strip_image_refs(message.lower())
    for reason, pattern in _FAMILIES:
        if pattern.search(text):
            return reason
    return None


# Quoted text without spaces (an image reference or a URL): double-quoted, or single-quoted and not
# opened by an apostrophe ("couldn't"). Quoted text with spaces is an error message (dockershim's
# {"message":"Get https://...: x509: ..."}) and is read.
_QUOTED = re.compile(r"\"[^\"\s]*\"|(?<![a-z])'[^'\s]*'")


def _strip_image_refs(text: str) -> str:
    # An image reference in quotes ("registry/notfound-app:404") must not look like a cause.
    return _QUOTED.sub('""', text)
