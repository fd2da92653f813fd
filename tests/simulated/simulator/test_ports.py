"""Ports for processes started later (the control plane's components, the deployment's servers)
come from below the kernel's ephemeral range, where no outgoing connection can take one between the
check and the process's bind."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from airflow_k8s_retry_testing import ports


def test_ports_come_from_below_the_ephemeral_range_and_never_twice() -> None:
    start = ports.ephemeral_start()
    given = [ports.free_port() for _ in range(200)]
    assert len(set(given)) == len(given)
    assert all(max(1024, start // 2) <= port < start for port in given), sorted(given)[-5:]


def test_a_port_something_listens_on_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        taken = held.getsockname()[1]
        other = ports.free_port()  # a free one, to be drawn second
        ports._given.discard(other)
        draws = iter([taken, other])
        monkeypatch.setattr(ports._random, "randint", lambda low, high: next(draws))
        assert ports.free_port() == other


def test_without_room_below_the_ephemeral_range_the_kernel_chooses(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    kernels = ports.ephemeral_start()
    narrow = tmp_path / "ip_local_port_range"
    narrow.write_text("2000\t60999\n")
    monkeypatch.setattr(ports, "EPHEMERAL_RANGE", narrow)
    assert ports.ephemeral_start() == 2000
    assert ports.free_port() >= kernels  # bound to port 0: the kernel's own range
