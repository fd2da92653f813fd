"""Image references and the registry's answers, in containerd's words.

The kubelet names images the way containerd does (``busybox`` is
``docker.io/library/busybox:latest``) and reports a failed pull with containerd's gRPC-wrapped
message. ``tools/controlplane/stages.py`` writes the same texts into KWOK's Stages, so both
simulators fail a pull alike.
"""

from __future__ import annotations

import hashlib
import re

_IMAGE_REF = re.compile(
    r"^(?:(?:[a-zA-Z0-9-]+\.)*[a-zA-Z0-9-]+(?::[0-9]+)?/)?[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
    r"(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*(?::[\w][\w.-]{0,127})?(?:@sha256:[0-9a-f]{64})?$"
)


def valid_reference(ref: str) -> bool:
    """Whether ``ref`` parses as an image reference (else the kubelet reports InvalidImageName)."""
    return _IMAGE_REF.match(ref) is not None


def normalize_image(ref: str) -> str:
    """``busybox`` -> ``docker.io/library/busybox:latest``, as containerd names images."""
    name, _, digest = ref.partition("@")
    first = name.split("/", 1)[0]
    if "/" not in name:
        name = f"docker.io/library/{name}"
    elif "." not in first and ":" not in first and first != "localhost":
        name = f"docker.io/{name}"
    if not digest and ":" not in name.rsplit("/", 1)[-1]:
        name += ":latest"
    return f"{name}@{digest}" if digest else name


def image_id(full: str) -> str:
    """The ``imageID`` a container status carries for a pulled image (a stable fake digest)."""
    return (
        f"{full.rsplit(':', 1)[0] if '@' not in full else full.split('@', maxsplit=1)[0]}@sha256:"
        + hashlib.sha256(full.encode()).hexdigest()
    )


def image_size(full: str) -> int:
    """A stable fake size in bytes, for the ``Pulled`` event."""
    return int(hashlib.sha256(full.encode()).hexdigest()[:6], 16) * 7


def pull_error(behaviour: str, ref: str) -> tuple[str, str]:
    """(gRPC-wrapped message, short cause) the way containerd reports a failed pull."""
    full = normalize_image(ref)
    repo = full.split("/", 1)[1].rsplit(":", 1)[0] if "/" in full else full
    if behaviour == "not_found":
        msg = (
            f'failed to pull and unpack image "{full}": failed to resolve reference "{full}": '
            f"{full}: not found"
        )
        return f"rpc error: code = NotFound desc = {msg}", msg
    if behaviour == "unauthorized":
        msg = (
            f'failed to pull and unpack image "{full}": failed to resolve reference "{full}": '
            f"failed to authorize: failed to fetch oauth token: unexpected status from GET request to "
            f"https://auth.docker.io/token?scope=repository%3A{repo.replace('/', '%2F')}%3Apull"
            f"&service=registry.docker.io: 401 Unauthorized"
        )
        return f"rpc error: code = Unknown desc = {msg}", msg
    digest = hashlib.sha256(full.encode()).hexdigest()
    msg = (
        f'failed to pull and unpack image "{full}": failed to copy: httpReadSeeker: failed open: '
        f"unexpected status code https://registry-1.docker.io/v2/{repo}/manifests/sha256:{digest}: "
        f"429 Too Many Requests - Server message: toomanyrequests: You have reached your pull rate "
        f"limit. You may increase the limit by authenticating and upgrading: "
        f"https://www.docker.com/increase-rate-limit"
    )
    return f"rpc error: code = Unknown desc = {msg}", msg
