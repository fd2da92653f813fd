"""A real UDP socket that collects StatsD datagrams, for tests that run Airflow with ``statsd_on``."""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass


@dataclass(frozen=True)
class Datagram:
    """One StatsD line: ``name[,tag=value...]:value|type``, split into its parts."""

    name: str
    tags: dict[str, str]
    value: str
    type: str

    @classmethod
    def parse(cls, line: str) -> Datagram:
        head, _, rest = line.partition(":")
        value, _, kind = rest.partition("|")
        name, *pairs = head.split(",")
        tags = dict(p.split("=", 1) for p in pairs if "=" in p)
        return cls(name, tags, value, kind.split("|")[0])


class StatsdListener:
    """Bind 127.0.0.1 on a free UDP port and keep every datagram received until :meth:`close`."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = int(self.sock.getsockname()[1])
        self.lines: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._receive, daemon=True)
        self._thread.start()

    def _receive(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.sock.recv(65535)
            except TimeoutError:
                continue
            except OSError:
                return
            # A client may pipeline several metrics into one datagram, one per line.
            self.lines.extend(line for line in data.decode(errors="replace").splitlines() if line)

    def datagrams(self) -> list[Datagram]:
        return [Datagram.parse(line) for line in list(self.lines)]

    def env(self, *, tags: bool = True) -> dict[str, str]:
        """Airflow's ``[metrics]`` settings that send StatsD here (tags in InfluxDB line style)."""
        return {
            "AIRFLOW__METRICS__STATSD_ON": "True",
            "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
            "AIRFLOW__METRICS__STATSD_PORT": str(self.port),
            "AIRFLOW__METRICS__STATSD_PREFIX": "airflow",
            "AIRFLOW__METRICS__STATSD_INFLUXDB_ENABLED": str(tags),
        }

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.sock.close()
