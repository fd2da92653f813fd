"""The API permissions this package uses, and one clear line when one of them is missing.

``deploy/rbac/`` ships them as a Role (per namespace), a ClusterRole (the triggerer's one watch
over all namespaces), a ServiceAccount and bindings; :data:`NAMESPACED_RULES` and
:data:`CLUSTER_RULES` are the same rules as data, and a test holds the manifests to them.

Each rule, and who needs it:

* ``pods``: ``create`` (operator: one pod per try), ``get`` (operator: adoption after a 409,
  the sweep's checks; trigger: the last look, a stuck feed's direct read, ``on_kill``'s check;
  api-server: the kill listener's check; sensor), ``list`` and ``watch`` (trigger and sensor:
  the shared feed; operator: the sweep of earlier tries' pods; api-server: ``list``, the kill
  listener's look for a killed try's pods), ``patch`` (the verdict stamp,
  the trigger's restart-safe history), ``delete`` (operator: cleanup by UID; trigger:
  ``on_kill``; api-server: the kill listener; sensor with ``delete_pod_on_finish``).
* ``pods/log``: ``get`` (operator: logs and the failure report).
* ``pods/exec``: ``create`` and ``get`` (operator, only with ``do_xcom_push``: reading the XCom
  sidecar; the websocket upgrade is a GET on older API servers, a POST on newer ones).
* ``events``: ``list`` and ``watch`` (trigger and sensor: Events are evidence, e.g.
  ``FailedMount``; operator: the failure report).
* ``batch`` ``jobs``: ``list`` and ``watch`` (sensor only, following a Job's pods).
* ``kueue.x-k8s.io`` ``workloads``: ``list`` (trigger and sensor, optional: a queued pod's log
  quotes why Kueue has not admitted its Workload yet; without it the log names the gates only).

A ``403`` the code cannot work around is reported with :func:`rbac_message`: one line naming the
verb, the resource and where, so the fix is one rule away.
"""

from __future__ import annotations

import re

from airflow_k8s_retry.kube.errors import KubeError

#: (API group, resource, verbs) a namespaced Role must grant in every namespace pods run in.
NAMESPACED_RULES: tuple[tuple[str, str, frozenset[str]], ...] = (
    ("", "pods", frozenset({"create", "get", "list", "watch", "patch", "delete"})),
    ("", "pods/log", frozenset({"get"})),
    ("", "pods/exec", frozenset({"create", "get"})),
    ("", "events", frozenset({"list", "watch"})),
    ("batch", "jobs", frozenset({"list", "watch"})),
    ("kueue.x-k8s.io", "workloads", frozenset({"list"})),
)
#: What the optional ClusterRole adds: one LIST+WATCH of this package's pods and of pod Events
#: over all namespaces, instead of one per namespace.
CLUSTER_RULES: tuple[tuple[str, str, frozenset[str]], ...] = (
    ("", "pods", frozenset({"list", "watch"})),
    ("", "events", frozenset({"list", "watch"})),
)

_DENIED = re.compile(r'cannot (?P<verb>[a-z]+) resource "(?P<resource>[^"]+)"')
#: Resources whose every use needs more than one verb; the hint names them all. An exec is a
#: websocket upgrade, authorized as ``get`` and as ``create``; the API's 403 names at most the
#: one it checked, and without ``create`` it names none (``pods "p" is forbidden: ``).
_VERBS_NEEDED: dict[str, tuple[str, ...]] = {"pods/exec": ("create", "get")}


def rbac_message(exc: KubeError, verb: str, resource: str, namespace: str | None) -> str:
    """One line: the permission the credentials lack, where, and the rule that grants it.

    The verb and resource come from the API's own answer when it names them (every apiserver
    does: ``User "x" cannot patch resource "pods" in API group "" in the namespace "y"``).
    """
    found = _DENIED.search(str(exc))
    if found:
        verb, resource = found["verb"], found["resource"]
    where = f'namespace "{namespace}"' if namespace else "the cluster scope"
    needed = _VERBS_NEEDED.get(resource)
    if needed:
        verbs = " and ".join(f'"{v}"' for v in needed)
        grant = f'grant verbs {verbs} on "{resource}"'
    else:
        grant = f'grant verb "{verb}" on "{resource}"'
    said = str(exc).strip() or f"HTTP {exc.status or 403} with no message"
    return (
        f"RBAC: may not {verb} {resource} in {where}; {grant} "
        f"(deploy/rbac/) to this service account. The API said: {said}"
    )
