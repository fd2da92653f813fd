"""``simulate`` hands its arguments to the simulator; the CLI module itself stays light."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from airflow_k8s_retry import cli


def test_simulate_passes_every_option_to_serve(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow_k8s_retry_testing import serve as serve_module

    calls: list[dict[str, Any]] = []

    def fake_serve(**kwargs: Any) -> int:
        calls.append(kwargs)
        return 7

    monkeypatch.setattr(serve_module, "serve", fake_serve)
    argv = [
        "simulate",
        "--scenario",
        "s.yaml",
        "--port",
        "8123",
        "--kubeconfig",
        "kc.yaml",
        "--audit",
        "a.log",
    ]
    assert cli.main(argv) == 7
    assert calls == [{"scenario": "s.yaml", "port": 8123, "kubeconfig": "kc.yaml", "audit": "a.log"}]
    assert cli.main(["simulate"]) == 7
    assert calls[-1] == {"scenario": None, "port": 0, "kubeconfig": None, "audit": None}


def test_a_command_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main([])
    assert exit_.value.code == 2
    assert "COMMAND" in capsys.readouterr().err


def test_importing_the_cli_loads_neither_airflow_nor_kubernetes() -> None:
    code = "import json, sys\nimport airflow_k8s_retry.cli\nprint(json.dumps(sorted(sys.modules)))\n"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    heavy = [
        m
        for m in json.loads(done.stdout)
        if m.split(".")[0] in {"airflow", "kubernetes", "kubernetes_asyncio", "aiohttp"}
    ]
    assert not heavy, heavy
