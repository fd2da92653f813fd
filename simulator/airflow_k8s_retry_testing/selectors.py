"""Label and field selectors as the apiserver parses them.

Pod launchers find their pods by label selector and read events by ``involvedObject`` field
selector; a selector the real apiserver would reject must be rejected here too (400), or tests
would pass against the simulator and fail against a cluster.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

Matcher = Callable[[Mapping[str, Any]], bool]

_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")

POD_FIELDS = (
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.phase",
    "status.podIP",
    "status.nominatedNodeName",
)
EVENT_FIELDS = (
    "metadata.name",
    "metadata.namespace",
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
)
GENERIC_FIELDS = ("metadata.name", "metadata.namespace")
FIELDS_BY_RESOURCE = {"pods": POD_FIELDS, "events": EVENT_FIELDS}


class SelectorError(ValueError):
    """A selector cannot be parsed; the message is what the apiserver would say."""


def _split_top(text: str) -> list[str]:
    """Split on commas that are not inside parentheses."""
    parts: list[str] = []
    depth = 0
    current = ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    parts.append(current)
    return [p.strip() for p in parts if p.strip()]


def _check_key(key: str, text: str) -> None:
    if not _KEY.match(key) or len(key.rsplit("/", maxsplit=1)[-1]) > 63:
        raise SelectorError(f'unable to parse requirement: invalid label key "{key}" in selector "{text}"')


def _check_value(value: str, text: str) -> None:
    if len(value) > 63 or not _VALUE.match(value):
        raise SelectorError(
            f'unable to parse requirement: invalid label value: "{value}" in selector "{text}"'
        )


Requirement = tuple[str, str, frozenset[str]]  # (key, in|notin|exists|absent, values)


def _requirement(part: str, text: str) -> Requirement:
    """One requirement of a label selector, checked as the apiserver checks it."""
    set_match = re.match(r"^(\S+)\s+(in|notin)\s*\((.*)\)$", part)
    if set_match:
        key, op, raw = set_match.group(1), set_match.group(2), set_match.group(3)
        _check_key(key, text)
        values = frozenset(v.strip() for v in raw.split(",") if v.strip())
        for value in values:
            _check_value(value, text)
        return key, op, values
    eq_match = re.match(r"^([^=!\s]+)\s*(==|=|!=)\s*(\S*)$", part)
    if eq_match:
        key, op, value = eq_match.group(1), eq_match.group(2), eq_match.group(3)
        _check_key(key, text)
        _check_value(value, text)
        return key, "notin" if op == "!=" else "in", frozenset([value])
    if part.startswith("!"):
        key = part[1:].strip()
        _check_key(key, text)
        return key, "absent", frozenset()
    _check_key(part, text)
    return part, "exists", frozenset()


def _holds(requirement: Requirement, labels: Mapping[str, Any]) -> bool:
    key, op, values = requirement
    if op == "in":
        return labels.get(key) in values
    if op == "notin":
        return labels.get(key) not in values
    if op == "exists":
        return key in labels
    return key not in labels  # absent


def parse_label_selector(text: str | None) -> Matcher:
    """Compile ``a=b,c!=d,e in (f,g),h notin (i),j,!k`` into a predicate over a labels mapping."""
    if not text or not text.strip():
        return lambda _labels: True
    requirements = [_requirement(part, text) for part in _split_top(text)]

    def matches(labels: Mapping[str, Any]) -> bool:
        return all(_holds(requirement, labels) for requirement in requirements)

    return matches


def field_value(obj: Mapping[str, Any], path: str) -> str:
    """The string value a field selector compares against ('' when absent)."""
    if path == "source":
        return str((obj.get("source") or {}).get("component") or "")
    current: Any = obj
    for part in path.split("."):
        if not isinstance(current, Mapping):
            return ""
        current = current.get(part)
    if current is None:
        return ""
    if isinstance(current, bool):
        return "true" if current else "false"
    return str(current)


def parse_field_selector(text: str | None, resource: str) -> Matcher:
    """Compile ``metadata.name=x,status.phase!=Running`` for ``resource``; unknown fields are 400."""
    if not text or not text.strip():
        return lambda _obj: True
    allowed = FIELDS_BY_RESOURCE.get(resource, GENERIC_FIELDS)
    requirements: list[tuple[str, bool, str]] = []  # (field, equal?, value)
    for part in _split_top(text):
        match = re.match(r"^([^=!\s]+)\s*(==|=|!=)\s*(.*)$", part)
        if not match:
            raise SelectorError(f"invalid selector: '{text}'; can't understand '{part}'")
        key, op, value = match.group(1), match.group(2), match.group(3).strip()
        if key not in allowed:
            raise SelectorError(f"field label not supported: {key}")
        requirements.append((key, op != "!=", value))

    def matches(obj: Mapping[str, Any]) -> bool:
        return all((field_value(obj, key) == value) == equal for key, equal, value in requirements)

    return matches
