"""Start measured triggerer processes against a running simulator and collect what they wrote.

A driver process (``bench.driver``) gets a throw-away ``AIRFLOW_HOME`` and a ``kubernetes_default``
connection pointing at the simulator's kubeconfig, exactly as a triggerer would be configured, so
both triggers resolve their cluster the way they do in production.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class DriverError(RuntimeError):
    """A driver process failed or ran over its time limit."""


def driver_env(kubeconfig: Path, airflow_home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    airflow_home.mkdir(parents=True, exist_ok=True)
    env.update(
        {
            "AIRFLOW_HOME": str(airflow_home),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{airflow_home / 'airflow.db'}",
            "AIRFLOW_CONN_KUBERNETES_DEFAULT": json.dumps(
                {"conn_type": "kubernetes", "extra": {"kube_config_path": str(kubeconfig)}}
            ),
            "PYTHONUNBUFFERED": "1",
            # Requests are counted per namespace from the audit log, so both sides watch per
            # namespace; the cluster-wide watch is measured by bench/hub_namespaces.py.
            "AIRFLOW_K8S_RETRY_WATCH_SCOPE": "namespace",
        }
    )
    return env


@dataclass
class Driver:
    """A started driver process; :meth:`result` waits for it."""

    name: str
    proc: subprocess.Popen[bytes]
    out: Path
    log: Path
    started: float
    timeout: float

    def result(self) -> dict[str, Any]:
        remaining = max(1.0, self.timeout - (time.monotonic() - self.started))
        try:
            self.proc.wait(timeout=remaining)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise DriverError(f"driver {self.name} ran over {self.timeout:.0f} s; see {self.log}") from None
        if self.proc.returncode != 0 or not self.out.exists():
            tail = self.log.read_text()[-3000:] if self.log.exists() else ""
            raise DriverError(f"driver {self.name} failed (exit {self.proc.returncode}):\n{tail}")
        data: dict[str, Any] = json.loads(self.out.read_text())
        return data


def start_driver(
    name: str, spec: dict[str, Any], workdir: Path, kubeconfig: Path, *, timeout: float
) -> Driver:
    """Start ``python -m bench.driver`` for ``spec`` (its kubeconfig is filled in here)."""
    workdir.mkdir(parents=True, exist_ok=True)
    spec = {**spec, "kubeconfig": str(kubeconfig)}
    spec_file = workdir / f"{name}.spec.json"
    spec_file.write_text(json.dumps(spec))
    out = workdir / f"{name}.out.json"
    if out.exists():
        out.unlink()
    log = workdir / f"{name}.log"
    home = Path(tempfile.mkdtemp(prefix=f"airflow-home-{name}-", dir=workdir))
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "bench.driver", str(spec_file), str(out)],
            env=driver_env(kubeconfig, home),
            stdout=sink,
            stderr=subprocess.STDOUT,
            cwd=Path(__file__).resolve().parent.parent,
        )
    return Driver(name, proc, out, log, time.monotonic(), timeout)
