"""The example DAGs (dags/01-05) started on a control plane of their own when the cluster tier
begins, and read back by ``test_the_example_dags.py`` at its end.

They run one after another in one Airflow interpreter (``AirflowHome.start_dags``). The runs
mostly wait (graces, retry delays, pods' run times), and so do the tier's other tests, so they
overlap instead of adding up: the session fixture ``example_runs`` (tests/cluster/
conftest.py) starts them with the first cluster test whenever the example module is selected.
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from demo.run import DAGS
from tests.cluster.kube import PodRecorder
from tests.support.cluster_session import REPO
from tests.support.example_dags import demo_scenario_on_a_control_plane
from tools.airflow_runner import AirflowHome, DagRunResult, MigratedDatabase
from tools.controlplane import ControlPlane, built_binaries

EXAMPLES = (
    "01_basic",
    "02_image_pull_retry",
    "03_rate_limit_recovers",
    "04_missing_secret",
    "05_eviction_relaunch",
)
MODULE = "test_the_example_dags"


@dataclass
class ExampleRuns:
    control_plane: ControlPlane
    owned: bool  # started here (not make cluster-up's), so stopped here
    recorder: PodRecorder
    home: AirflowHome
    proc: subprocess.Popen[str]  # ``airflow dags test`` of each example in turn, in one interpreter
    started: float
    done: dict[str, DagRunResult] | None = None

    @classmethod
    def start(cls, work: Path, database: MigratedDatabase) -> ExampleRuns:
        scenario = demo_scenario_on_a_control_plane()
        running = ControlPlane.attach(REPO / ".cluster")
        if running is not None and running.scenario.to_dict() == scenario.to_dict():
            cp, owned = running, False
        else:
            found = built_binaries()
            if found is None:
                message = "the control plane is not built; run 'make controlplane'"
                if os.environ.get("AIRFLOW_K8S_RETRY_REQUIRE_CLUSTER") == "1":
                    pytest.fail(message)
                pytest.skip(message)
            cp, owned = ControlPlane(work / "controlplane", found, scenario), True
            cp.start()
        recorder = PodRecorder(cp.kubeconfig).__enter__()
        home = AirflowHome.create(work / "home", dags_folder=DAGS, database=database)
        proc = home.start_dags(EXAMPLES, kubeconfig=cp.kubeconfig)
        return cls(cp, owned, recorder, home, proc, time.monotonic())

    def results(self) -> dict[str, DagRunResult]:
        """Every run's result, once all have ended; the recorder stops then."""
        if self.done is None:
            runs = self.home.finish_dags(EXAMPLES, self.proc, self.started, timeout=900)
            self.done = {r.dag_id: r for r in runs}
            (self.home.home / "airflow-output.log").write_text("".join(r.output for r in self.done.values()))
        self.recorder.__exit__(None, None, None)
        return self.done

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()
        self.recorder.__exit__(None, None, None)
        if self.owned:
            self.control_plane.stop()


def selected(items: list[pytest.Item]) -> bool:
    return any(item.nodeid.split("::")[0].endswith(f"{MODULE}.py") for item in items)
