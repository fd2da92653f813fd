"""The unit tier runs in this process alone: a test here that opens a network socket or starts a
process fails with a line saying so, whatever it meant to test. Such a test belongs to
``tests/simulated`` (the in-process simulator), ``tests/airflow`` (Airflow in a subprocess) or a tier
above; mock at this package's boundary instead to keep it here."""

from __future__ import annotations

import asyncio
import platform
import socket
import subprocess
import sys
from collections.abc import Iterator
from types import FrameType
from typing import Any

import pytest

NETWORK = (socket.AF_INET, socket.AF_INET6)


class LeftTheUnitTier(AssertionError):
    pass


def refuse(what: str) -> LeftTheUnitTier:
    return LeftTheUnitTier(
        f"a unit test {what}; move the test to tests/simulated or tests/airflow, or mock at the "
        "package's boundary"
    )


@pytest.fixture(autouse=True)
def stays_in_this_process(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    connect, bind = socket.socket.connect, socket.socket.bind

    def guarded_connect(self: socket.socket, address: Any) -> None:
        if self.family in NETWORK:
            raise refuse(f"connected to {address!r}")
        connect(self, address)

    def guarded_bind(self: socket.socket, address: Any) -> None:
        if self.family in NETWORK:
            raise refuse(f"listened on {address!r}")
        bind(self, address)

    popen = subprocess.Popen

    def no_process(*args: Any, **kwargs: Any) -> Any:
        # The one process a library starts on its own: platform.architecture() runs `file -b` on the
        # interpreter (Airflow asks while building a DAG).
        frame: FrameType | None = sys._getframe(1)
        while frame is not None:
            if frame.f_code.co_filename == platform.__file__:
                return popen(*args, **kwargs)
            frame = frame.f_back
        raise refuse(f"started a process ({args[0] if args else kwargs.get('args')!r})")

    monkeypatch.setattr(socket.socket, "connect", guarded_connect)
    monkeypatch.setattr(socket.socket, "bind", guarded_bind)
    monkeypatch.setattr(subprocess, "Popen", no_process)
    monkeypatch.setattr(asyncio, "create_subprocess_exec", no_process)
    monkeypatch.setattr(asyncio, "create_subprocess_shell", no_process)
    yield
