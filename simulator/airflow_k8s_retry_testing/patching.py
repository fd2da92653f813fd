"""The three PATCH flavours the apiserver accepts for built-in objects.

Clients pick the flavour by Content-Type: the ``kubernetes`` client sends strategic merge for a
dict body and JSON patch for a list, ``kubectl label`` sends strategic merge, and other tools send
RFC 7386 merge patches. Each must behave as on a real cluster, including ``null`` deleting a key.
"""

from __future__ import annotations

import copy
from typing import Any

# Lists in a Pod that strategic merge patch merges by a key instead of replacing.
MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "ports": "containerPort",
    "conditions": "type",
    "tolerations": None,
    "imagePullSecrets": "name",
}


class PatchError(ValueError):
    """The patch document cannot be applied."""


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: mappings merge recursively, ``null`` deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target: Any, patch: Any, key: str | None = None) -> Any:
    """Strategic merge: like a merge patch, but known lists of objects merge by their merge key."""
    if isinstance(patch, dict):
        return _strategic_map(target, patch)
    merge_key = MERGE_KEYS.get(key) if key is not None else None
    if isinstance(patch, list) and merge_key and isinstance(target, list):
        return _strategic_list(target, patch, merge_key)
    return copy.deepcopy(patch)


def _strategic_map(target: Any, patch: dict[str, Any]) -> Any:
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if patch.get("$patch") == "delete":
        return None
    result = dict(target) if isinstance(target, dict) else {}
    for k, value in patch.items():
        if k.startswith("$"):
            continue
        merged = None if value is None else strategic_merge_patch(result.get(k), value, k)
        deleted = value is None or (
            merged is None and isinstance(value, dict) and value.get("$patch") == "delete"
        )
        if deleted:
            result.pop(k, None)
        else:
            result[k] = merged
    return result


def _strategic_list(target: list[Any], patch: list[Any], merge_key: str) -> list[Any]:
    result = [copy.deepcopy(item) for item in target]
    for item in patch:
        if not isinstance(item, dict) or merge_key not in item:
            raise PatchError(f"map: {item!r} does not contain declared merge key: {merge_key}")
        index = next(
            (
                i
                for i, existing in enumerate(result)
                if isinstance(existing, dict) and existing.get(merge_key) == item[merge_key]
            ),
            None,
        )
        if item.get("$patch") == "delete":
            if index is not None:
                result.pop(index)
        elif index is None:
            result.append({k: v for k, v in item.items() if not k.startswith("$")})
        else:
            result[index] = strategic_merge_patch(result[index], item)
    return result


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"invalid JSON pointer {path!r}: must start with '/'")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _parent(doc: Any, parts: list[str], path: str) -> tuple[Any, str]:
    current = doc
    for part in parts[:-1]:
        if isinstance(current, dict) and part in current:
            current = current[part]
        elif isinstance(current, list) and part.isdigit() and int(part) < len(current):
            current = current[int(part)]
        else:
            raise PatchError(f"doc is missing path: {path!r}")
    return current, parts[-1]


def json_patch(target: Any, operations: Any) -> Any:
    """RFC 6902 operations: add, remove, replace, test, copy, move."""
    if not isinstance(operations, list):
        raise PatchError("a JSON patch must be a list of operations")
    doc = copy.deepcopy(target)
    for op in operations:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise PatchError(f"invalid JSON patch operation {op!r}: needs 'op' and 'path'")
        doc = _apply(doc, op)
    return doc


def _apply(doc: Any, op: dict[str, Any]) -> Any:
    """Apply one operation; returns the document (a new one when the whole of it is replaced)."""
    kind, path = op["op"], op["path"]
    if kind in ("copy", "move"):
        source = op.get("from", "")
        source_parent, source_key = _parent(doc, _pointer(source), source)
        value = copy.deepcopy(_get(source_parent, source_key, source))
        if kind == "move":
            _remove(source_parent, source_key, source)
        op = {"op": "add", "path": path, "value": value}
        kind = "add"
    parts = _pointer(path)
    if not parts:
        if kind in ("add", "replace"):
            return copy.deepcopy(op.get("value"))
        raise PatchError(f"cannot {kind} the whole document")
    parent, key = _parent(doc, parts, path)
    value = copy.deepcopy(op.get("value"))
    if kind == "add":
        _add(parent, key, value)
    elif kind == "remove":
        _remove(parent, key, path)
    elif kind == "replace":
        _get(parent, key, path)
        parent[int(key) if isinstance(parent, list) else key] = value
    elif kind == "test":
        if _get(parent, key, path) != op.get("value"):
            raise PatchError(f"testing value {path} failed")
    else:
        raise PatchError(f"unexpected JSON patch operation {kind!r}")
    return doc


def _add(parent: Any, key: str, value: Any) -> None:
    if not isinstance(parent, list):
        parent[key] = value
    elif key == "-":
        parent.append(value)
    else:
        parent.insert(int(key), value)


def _get(parent: Any, key: str, path: str) -> Any:
    if isinstance(parent, list) and key.isdigit() and int(key) < len(parent):
        return parent[int(key)]
    if isinstance(parent, dict) and key in parent:
        return parent[key]
    raise PatchError(f"doc is missing path: {path!r}")


def _remove(parent: Any, key: str, path: str) -> None:
    _get(parent, key, path)
    if isinstance(parent, list):
        parent.pop(int(key))
    else:
        del parent[key]
