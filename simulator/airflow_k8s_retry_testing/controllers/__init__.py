"""The simulator's node side, split as Kubernetes splits it.

``scheduler`` (with the cluster autoscaler), ``kubelet`` (with ``sources``, the volumes and env
it resolves, and ``registry``, image references and pull errors), ``nodes`` (node lifecycle,
taint eviction, pod GC), ``disruptions`` (the scenario's scripted ones) and ``jobs`` (the Job
controller). They share ``runs`` (their private view of pods and nodes), ``status`` (the status
manager writing pod status and Events) and ``timers``; ``components`` wires them together.
"""
