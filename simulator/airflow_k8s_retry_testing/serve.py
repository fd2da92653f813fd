"""Serve a ``FakeCluster`` in the foreground until SIGINT or SIGTERM (``airflow-k8s-retry simulate``).

The CLI and the demo need a simulator that outlives one test: this runs it, writes the kubeconfig
where asked, prints how to reach it, and shuts down cleanly on a signal.
"""

from __future__ import annotations

import gc
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

from airflow_k8s_retry_testing.cluster import FakeCluster
from airflow_k8s_retry_testing.scenario import ScenarioError


def serve(
    scenario: str | None,
    port: int = 0,
    kubeconfig: str | None = None,
    audit: str | None = None,
) -> int:
    """Run the simulator until interrupted; returns a process exit code (0 ok, 2 bad scenario)."""
    try:
        cluster = FakeCluster(scenario, port=port, audit=audit, kubeconfig=kubeconfig, tls=True)
    except ScenarioError as exc:
        print(f"error: invalid scenario: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()
    # This process only serves the simulator: collect garbage in larger batches, since full
    # collections over thousands of pods otherwise stall the event loop for hundreds of ms.
    gc.freeze()
    gc.set_threshold(50_000, 20, 1_000)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        try:
            cluster.start()
        except (OSError, RuntimeError) as exc:
            print(f"error: cannot start the simulator on port {port}: {exc}", file=sys.stderr)
            return 1
        print(f"FakeCluster serving at {cluster.url}", flush=True)
        print(f"kubeconfig: {Path(cluster.kubeconfig).resolve()}", flush=True)
        print(f"  export KUBECONFIG={Path(cluster.kubeconfig).resolve()}", flush=True)
        if audit:
            print(f"audit log: {Path(audit).resolve()}", flush=True)
        print("Press Ctrl-C to stop.", flush=True)
        while not stop.wait(0.5):
            pass
        return 0
    finally:
        cluster.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
