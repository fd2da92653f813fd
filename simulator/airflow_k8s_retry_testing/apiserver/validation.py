"""Object metadata validation, with the API server's field paths and messages.

Names are RFC 1123 subdomains (namespaces: labels), label keys and values follow the label
syntax, annotation values are strings. Each problem is a ``Cause``; a create or update with any
answers 422 ``Invalid`` listing them all.
"""

from __future__ import annotations

import re

from airflow_k8s_retry_testing.apiserver.errors import Cause
from airflow_k8s_retry_testing.store import Obj

DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)

LABEL_MESSAGE = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
    "start and end with an alphanumeric character"
)


def validate_metadata(meta: Obj, kind: str) -> list[Cause]:
    causes = _name_causes(meta.get("name"), kind)
    labels = meta.get("labels") or {}
    if not isinstance(labels, dict):
        causes.append(("FieldValueInvalid", "metadata.labels", "Invalid value: labels must be a map"))
        return causes
    for key, value in labels.items():
        causes += _label_causes(key, value)
    annotations = meta.get("annotations") or {}
    if not isinstance(annotations, dict) or any(not isinstance(v, str) for v in annotations.values()):
        causes.append(
            ("FieldValueInvalid", "metadata.annotations", "Invalid value: annotation values must be strings")
        )
    return causes


def _name_causes(name: str | None, kind: str) -> list[Cause]:
    if not name:
        return [("FieldValueRequired", "metadata.name", "Required value: name or generateName is required")]
    if kind != "Namespace" and (len(name) > 253 or not DNS_SUBDOMAIN.match(name)):
        return [
            (
                "FieldValueInvalid",
                "metadata.name",
                f'Invalid value: "{name}": a lowercase RFC 1123 subdomain must consist of lower case '
                f"alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character "
                f"(e.g. 'example.com', regex used for validation is "
                f"'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
            )
        ]
    if kind == "Namespace" and (len(name) > 63 or not DNS_LABEL.match(name)):
        return [("FieldValueInvalid", "metadata.name", f'Invalid value: "{name}": {LABEL_MESSAGE}')]
    return []


def _label_causes(key: object, value: object) -> list[Cause]:
    causes: list[Cause] = []
    if not _LABEL_KEY.match(str(key)) or len(str(key).split("/")[-1]) > 63:
        causes.append(
            (
                "FieldValueInvalid",
                "metadata.labels",
                f"Invalid value: \"{key}\": name part must consist of alphanumeric characters, '-', "
                f"'_' or '.', and must start and end with an alphanumeric character",
            )
        )
    if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.match(value):
        causes.append(
            (
                "FieldValueInvalid",
                "metadata.labels",
                f'Invalid value: "{value}": a valid label must be '
                f"an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start "
                f"and end with an alphanumeric character",
            )
        )
    return causes
