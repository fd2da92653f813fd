"""Free ports for a process started later, chosen where no outgoing connection can take them.

A port found free by binding port 0 comes from the kernel's ephemeral range
(``/proc/sys/net/ipv4/ip_local_port_range``, 32768-60999 by default): the range every outgoing TCP
connection draws its local port from. Between that check and the bind of the process the port is
meant for (seconds later, for a control plane's components), a busy machine's outgoing connections
can take it, and the process fails with "address already in use". :func:`free_port` picks at random
from below the ephemeral range instead, checks the port is free, and never hands out one port twice
in a process.
"""

from __future__ import annotations

import random
import socket
import threading
from pathlib import Path

#: Where the kernel's ephemeral range is configured (Linux).
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")

_given: set[int] = set()
_lock = threading.Lock()
_random = random.SystemRandom()


def ephemeral_start() -> int:
    """The first port of the kernel's ephemeral range (32768, Linux's default, if unreadable)."""
    try:
        return int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _kernel_choice() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_port() -> int:
    """A port free on 127.0.0.1 now, below the ephemeral range when there is room for it (the
    upper half of the ports below it, at least 1024); the kernel's choice otherwise."""
    start = ephemeral_start()
    low, high = max(1024, start // 2), start - 1
    with _lock:
        if high - low >= 1024:
            for _ in range(256):
                port = _random.randint(low, high)
                if port not in _given and _bindable(port):
                    _given.add(port)
                    return port
        port = _kernel_choice()
        _given.add(port)
        return port
