"""Run the simulator in its own process, so its CPU is never counted against a measured triggerer.

Every phase of the benchmark starts a fresh ``airflow-k8s-retry simulate`` with its own scenario
and audit file, waits until it prints that it serves, and stops it with SIGTERM afterwards. The
audit file (one JSON line per request and per pod lifecycle change) is the only source of the
request counts and of the "state changed" timestamps the benchmark reports.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

CLI = str(Path(sys.executable).with_name("airflow-k8s-retry"))


class SimulatorError(RuntimeError):
    """The simulator process did not start or died."""


class SimulatorProcess:
    """``airflow-k8s-retry simulate`` as a context manager.

    :param workdir: where the scenario, kubeconfig, audit log and output are written.
    :param scenario: the scenario as a dict (written as YAML).
    """

    def __init__(self, workdir: Path, scenario: dict[str, Any], *, start_timeout: float = 60.0) -> None:
        self.workdir = workdir
        self.scenario = scenario
        self.start_timeout = start_timeout
        self.kubeconfig = workdir / "kubeconfig"
        self.audit = workdir / "audit.jsonl"
        self.output = workdir / "simulator.log"
        self.proc: subprocess.Popen[str] | None = None

    def __enter__(self) -> SimulatorProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        scenario_file = self.workdir / "scenario.yaml"
        scenario_file.write_text(yaml.safe_dump(self.scenario, sort_keys=False))
        if self.audit.exists():
            self.audit.unlink()
        self.proc = subprocess.Popen(
            [
                CLI,
                "simulate",
                "--scenario",
                str(scenario_file),
                "--port",
                "0",
                "--kubeconfig",
                str(self.kubeconfig),
                "--audit",
                str(self.audit),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        assert self.proc.stdout is not None
        stdout = self.proc.stdout
        seen: list[str] = []
        ready = threading.Event()

        def read_banner() -> None:
            for line in stdout:
                seen.append(line)
                if line.startswith("Press Ctrl-C"):
                    break
            ready.set()

        threading.Thread(target=read_banner, name="simulator-banner", daemon=True).start()
        if not ready.wait(self.start_timeout):
            self.stop()
            raise SimulatorError(f"simulator did not start in {self.start_timeout} s: {''.join(seen)}")
        if not seen or not seen[-1].startswith("Press Ctrl-C"):
            self.stop()
            raise SimulatorError(f"simulator exited during start-up: {''.join(seen)}")
        self.output.write_text("".join(seen))

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise SimulatorError("simulator not started")
        return self.proc.pid

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc.stdout is not None:
            rest = proc.stdout.read()
            proc.stdout.close()
            with self.output.open("a") as out:
                out.write(rest)

    def records(self) -> list[dict[str, Any]]:
        return list(read_audit(self.audit))


def read_audit(path: Path) -> Iterator[dict[str, Any]]:
    """The audit file's records (a half-written last line, if any, is skipped)."""
    with path.open() as lines:
        for line in lines:
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                continue
