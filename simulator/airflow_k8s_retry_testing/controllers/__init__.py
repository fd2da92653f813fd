"""The simulator's node side, split as Kubernetes splits it.

``scheduler`` (with the cluster autoscaler), ``kubelet`` (with ``sources``, the volumes and env
it resolves, ``registry``, image references and pull errors, and ``shell``, the exec shell),
``nodes`` (node lifecycle, taint eviction, pod GC), ``disruptions`` (the scenario's scripted ones)
and ``jobs`` (the Job controller). They share ``runs`` (their private view of pods and nodes) and
``status`` (the status manager writing pod status and Events), run on the cluster's clock
(``timers``), and learn of pods from the store, as real controllers from their watches;
``components`` wires them together. The API server imports none of them.
"""
