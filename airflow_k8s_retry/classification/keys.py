"""History keys: the names under which ``History.first_seen`` remembers a signal.

One rule writes a key (its grace timer starts when the key is first seen) and another may read it
(a pod that vanishes is explained by what was seen before). Both sides use the constructors here,
so the protocol between rows of the table is a symbol, not two f-strings that must agree. The
string values are stable: they are stored in pod annotations and trigger kwargs.
"""

from __future__ import annotations

from typing import NewType

from airflow_k8s_retry.classification.model import Reason

#: A key of ``History.first_seen``.
SignalKey = NewType("SignalKey", str)

POD_GONE = SignalKey("pod.gone")
POD_PENDING = SignalKey("pod.pending")
POD_SUCCEEDED = SignalKey("pod.succeeded")
POD_RUNNING = SignalKey("pod.running")
POD_FAILED = SignalKey("pod.failed")
POD_DELETING = SignalKey("pod.deleting")
POD_DEADLINE = SignalKey("pod.deadline")
POD_UNRECOGNISED = SignalKey("pod.unrecognised")
STORAGE_LIMIT = SignalKey("container.storage_limit")
#: Written by the disruption rules, read by ``gone_after_disruption``.
NODE_DISRUPTION = SignalKey("node.disruption")
#: Written by the lost-node rules, read by ``gone_after_node_lost``.
NODE_LOST = SignalKey("node.lost")
NODE_LOST_UNKNOWN_PHASE = SignalKey("node.lost.unknown_phase")
UNSCHEDULABLE = SignalKey("schedule.unschedulable")
#: Written while the pod waits behind scheduling gates (its queue deadline runs from it).
SCHEDULING_GATED = SignalKey("schedule.gated")


def of_reason(reason: Reason) -> SignalKey:
    """A pod-level signal named by its reason code (``volume.mount_failed``)."""
    return SignalKey(reason.value)


def of_container(reason: Reason, container: str) -> SignalKey:
    """A signal of one container, named by its reason code (``image.not_found:base``)."""
    return SignalKey(f"{reason.value}:{container}")


def container_oom(container: str) -> SignalKey:
    return SignalKey(f"container.oom:{container}")


def container_start(container: str) -> SignalKey:
    return SignalKey(f"container.start:{container}")


def container_exit(container: str) -> SignalKey:
    return SignalKey(f"container.exit:{container}")


def crash_loop(reason: Reason, container: str) -> SignalKey:
    return SignalKey(f"{reason.value}.loop:{container}")


def status_behind(generation: int) -> SignalKey:
    """The kubelet's status lagging the pod's spec at ``generation`` (each spec change waits anew)."""
    return SignalKey(f"pod.status_behind_spec:{generation}")


def gone_after(reason: Reason) -> SignalKey:
    """The final signal of a pod that vanished after ``reason`` was seen."""
    return SignalKey(f"{reason.value}.gone")


def scale_up(event_identity: str) -> SignalKey:
    """One Event saying a node is being provisioned for the pod (cluster-autoscaler's scale-up,
    Karpenter's nomination), by its identity: it extends the schedule wait."""
    return SignalKey(f"schedule.scale_up:{event_identity}")
