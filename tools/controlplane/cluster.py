"""Start and stop a real control plane on loopback: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and KWOK, from the binaries ``make controlplane`` builds.

Each component is a child process in its own session, logging to ``DIR/logs/NAME.log``;
``DIR/state.json`` records their pids and ports, so another process (``make cluster-down``, a
test session reusing ``make cluster-up``'s cluster) can find and stop them. ``DIR/kubeconfig`` is
the admin's (client certificate in ``system:masters``, namespace ``default``).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airflow_k8s_retry_testing.ports import free_port
from airflow_k8s_retry_testing.scenario import DEFAULT_NODES, NodeSpec, Scenario
from tools.controlplane import pki as pki_module
from tools.controlplane.stages import check_supported, kwok_config

COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
#: The components a running control plane cannot do without (a KWOK process plays one node: a
#: node whose process was stopped is a lost node, not a broken control plane).
CORE = COMPONENTS[:4]
#: Process name prefix of the KWOK process that plays one node: ``kwok@NODE``.
KWOK_PREFIX = "kwok@"
#: Port name prefix of a node's kubelet endpoint (the harness's front of its KWOK process).
KUBELET_PREFIX = "kubelet@"
#: The process that plays what KWOK's Stages cannot: the scenario's disruptions, registry outages
#: that end (``for_seconds``) and the containers' logs (``run.log``); see :mod:`.harness`.
HARNESS = "harness"
#: The repository's root, where the harness process imports ``tools.controlplane`` from.
ROOT = Path(__file__).resolve().parents[2]
#: Builds the binaries into a cache keyed by the pins, and with ``--path`` names that folder.
BUILD = Path(__file__).with_name("build.sh")
#: The KWOK resources read from the API server instead of the config file. Never ``Exec`` or
#: ``ClusterExec``: KWOK's exec runs the client's command on this machine.
KWOK_CRDS = ("Logs",)
#: The annotation KWOK selects the nodes it plays the kubelet of by.
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
SERVICE_CIDR = "10.96.0.0/16"
#: Client identities: file stem -> (user, groups), as each component authenticates in a real cluster.
CLIENTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "admin": ("kubernetes-admin", ("system:masters",)),
    "kube-controller-manager": ("system:kube-controller-manager", ()),
    "kube-scheduler": ("system:kube-scheduler", ()),
    "kwok": ("kwok-controller", ("system:masters",)),
}


class ControlPlaneError(RuntimeError):
    """The control plane cannot be started or found; the message says what to do."""


def built_binaries() -> Path | None:
    """The folder ``make controlplane`` built the binaries into, or ``None`` when they are not built
    for these pins: ``AIRFLOW_K8S_RETRY_CONTROLPLANE_BIN`` when set, else ``build.sh --path``."""
    given = os.environ.get("AIRFLOW_K8S_RETRY_CONTROLPLANE_BIN")
    if given:
        return Path(given)
    done = subprocess.run(["bash", str(BUILD), "--path"], capture_output=True, text=True, check=False)
    return Path(done.stdout.strip()) if done.returncode == 0 else None


def _environment(name: str) -> dict[str, str] | None:
    """A process's environment: the harness imports this package from the repository's root (it
    runs in the cluster's folder); the binaries inherit this process's."""
    if name != HARNESS:
        return None
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{path}" if path else str(ROOT)}


def port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def _alive(pid: int, binary: str) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    state = stat.rsplit(")", 1)[-1].split()[0]
    return state != "Z" and cmdline == binary


def kubeconfig_text(server: str, ca: bytes, cert: bytes, key: bytes, user: str) -> str:
    import base64

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "controlplane", "cluster": {"server": server, "certificate-authority-data": b64(ca)}}
            ],
            "users": [
                {"name": user, "user": {"client-certificate-data": b64(cert), "client-key-data": b64(key)}}
            ],
            "contexts": [
                {
                    "name": "controlplane",
                    "context": {"cluster": "controlplane", "user": user, "namespace": "default"},
                }
            ],
            "current-context": "controlplane",
        },
        indent=2,
    )


@dataclass
class ControlPlane:
    """A real control plane in ``directory``; :meth:`start` returns once it is ready.

    Example::

        with ControlPlane(Path(".cluster"), bin_dir, Scenario.load("s.yaml")) as cp:
            api = kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(str(cp.kubeconfig)))
    """

    directory: Path
    bin_dir: Path
    scenario: Scenario = field(default_factory=Scenario)
    nodes: int = 3
    apiserver_port: int | None = None
    #: More kube-apiserver flags (the benchmark adds its audit log with them).
    apiserver_extra_args: list[str] = field(default_factory=list)
    ports: dict[str, int] = field(default_factory=dict)
    pids: dict[str, int] = field(default_factory=dict)
    args: dict[str, list[str]] = field(default_factory=dict)
    _procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        # Components run with the cluster folder as their working directory: every path is absolute.
        self.directory = self.directory.absolute()
        self.bin_dir = self.bin_dir.absolute()

    # -- paths ----------------------------------------------------------------------------------

    @property
    def kubeconfig(self) -> Path:
        return self.directory / "kubeconfig"

    @property
    def state_file(self) -> Path:
        return self.directory / "state.json"

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports['kube-apiserver']}"

    @property
    def etcd_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['etcd']}"

    def binary(self, name: str) -> str:
        if name == HARNESS:
            return sys.executable
        if name.startswith(KWOK_PREFIX):
            name = "kwok"
        return str((self.bin_dir / name).resolve())

    def lost_marker(self, node: str) -> Path:
        """Written before a node's KWOK process is stopped on purpose (a ``node_lost`` disruption)."""
        return self.directory / "lost" / node

    def log_path(self, name: str) -> Path:
        return self.directory / "logs" / f"{name.replace('@', '-')}.log"

    # -- finding a running one ------------------------------------------------------------------

    @classmethod
    def attach(cls, directory: Path) -> ControlPlane | None:
        """The control plane whose state is in ``directory`` if all of it is still running."""
        state_file = directory / "state.json"
        if not state_file.exists():
            return None
        state = json.loads(state_file.read_text())
        cp = cls(directory, Path(state["bin_dir"]), Scenario.from_dict(state.get("scenario")))
        cp.ports = {k: int(v) for k, v in state["ports"].items()}
        cp.pids = {k: int(v) for k, v in state["pids"].items()}
        cp.args = {k: list(v) for k, v in state.get("args", {}).items()}
        core = {name: cp.pids.get(name) for name in (*CORE, HARNESS)}
        if all(pid is not None and _alive(pid, cp.binary(name)) for name, pid in core.items()):
            return cp
        return None

    def running(self) -> list[str]:
        return [name for name, pid in self.pids.items() if _alive(pid, self.binary(name))]

    # -- start ----------------------------------------------------------------------------------

    def start(self, timeout: float = 240.0) -> None:
        check_supported(self.scenario)
        missing = [n for n in COMPONENTS if not os.access(self.bin_dir / n, os.X_OK)]
        if missing:
            raise ControlPlaneError(
                f"controlplane: {', '.join(missing)} not found in {self.bin_dir}; "
                "run 'make controlplane' first"
            )
        if self.state_file.exists():
            other = ControlPlane.attach(self.directory)
            if other is not None:
                raise ControlPlaneError(
                    f"controlplane: a cluster is already running from {self.directory} (api server "
                    f"{other.server}); stop it first with 'make cluster-down'"
                )
            ControlPlane._from_state(self.directory).stop()
        if self.apiserver_port is not None and port_in_use(self.apiserver_port):
            raise ControlPlaneError(
                f"controlplane: port {self.apiserver_port} on 127.0.0.1 is in use; choose another "
                "(APISERVER_PORT=N) or leave it unset for a free one"
            )
        shutil.rmtree(self.directory, ignore_errors=True)
        (self.directory / "logs").mkdir(parents=True)
        deadline = time.monotonic() + timeout
        try:
            self._start_all(deadline)
        except BaseException:
            self.stop()
            raise

    def _start_all(self, deadline: float) -> None:
        pki = pki_module.create(self.directory / "pki", CLIENTS)
        self.ports = {
            "etcd": free_port(),
            "etcd-peer": free_port(),
            "kube-apiserver": self.apiserver_port or free_port(),
            "kube-controller-manager": free_port(),
            "kube-scheduler": free_port(),
        }
        for stem in CLIENTS:
            pair = pki.clients[stem]
            text = kubeconfig_text(
                f"https://127.0.0.1:{self.ports['kube-apiserver']}",
                pki.ca_pem(),
                pair.cert.read_bytes(),
                pair.key.read_bytes(),
                stem,
            )
            path = self.kubeconfig if stem == "admin" else self.directory / f"{stem}.kubeconfig"
            path.write_text(text)
            path.chmod(0o600)
        self._launch("etcd", self._etcd_args())
        self._wait("etcd", deadline, self._etcd_healthy)
        self._launch("kube-apiserver", self._apiserver_args(pki))
        self._wait("kube-apiserver", deadline, functools.partial(self._https_ok, "kube-apiserver", "/readyz"))
        self._launch("kube-controller-manager", self._controller_manager_args(pki))
        self._launch("kube-scheduler", self._scheduler_args(pki))
        from tools.controlplane.objects import ClusterObjects

        objects = ClusterObjects(self.kubeconfig)
        try:
            # Before KWOK starts: it watches Logs objects from the start.
            objects.create_logs_definition()
            self._wait("kube-apiserver", deadline, objects.logs_definition_established)
            nodes = self._launch_nodes()
            for name in ("kube-controller-manager", "kube-scheduler"):
                self._wait(name, deadline, functools.partial(self._https_ok, name, "/healthz"))
            objects.create_nodes(KWOK_NODE_ANNOTATION, nodes)
            objects.create_scenario_objects(self.scenario)
            self._wait(f"{KWOK_PREFIX}{nodes[0].name}", deadline, objects.nodes_ready)
            self._wait("kube-controller-manager", deadline, objects.service_accounts_ready)
        finally:
            objects.close()
        self._launch(HARNESS, ["-m", "tools.controlplane", "harness", "--dir", str(self.directory)])
        self._wait(HARNESS, deadline, (self.directory / "harness.ready").exists)

    def _launch_nodes(self) -> list[NodeSpec]:
        config = self.directory / "kwok.yaml"
        config.write_text(kwok_config(self.scenario))
        given = () if self.scenario.nodes == DEFAULT_NODES else self.scenario.nodes
        nodes = list(given) or [NodeSpec(name=f"kwok-node-{i + 1}") for i in range(self.nodes)]
        for node in nodes:
            self.ports[f"{KWOK_PREFIX}{node.name}"] = free_port()
            self.ports[f"{KUBELET_PREFIX}{node.name}"] = free_port()
            self._launch(f"{KWOK_PREFIX}{node.name}", self._kwok_args(node.name, config))
        self._write_state()
        return nodes

    # -- the components -------------------------------------------------------------------------

    def _etcd_args(self) -> list[str]:
        client = f"http://127.0.0.1:{self.ports['etcd']}"
        peer = f"http://127.0.0.1:{self.ports['etcd-peer']}"
        return [
            "--name=controlplane",
            f"--data-dir={self.directory / 'etcd'}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=controlplane={peer}",
            "--log-level=warn",
            # A throw-away test cluster: no fsync (the machine is shared; state is removed at the end).
            "--unsafe-no-fsync",
        ]

    def _apiserver_args(self, pki: pki_module.Pki) -> list[str]:
        return [
            f"--etcd-servers={self.etcd_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self.ports['kube-apiserver']}",
            f"--tls-cert-file={pki.apiserver.cert}",
            f"--tls-private-key-file={pki.apiserver.key}",
            f"--client-ca-file={pki.ca.cert}",
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki.service_account_pub}",
            f"--service-account-signing-key-file={pki.service_account_key}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            f"--kubelet-client-certificate={pki.kubelet_client.cert}",
            f"--kubelet-client-key={pki.kubelet_client.key}",
            # KWOK's node servers present a certificate of this CA: pods/log is verified TLS.
            f"--kubelet-certificate-authority={pki.ca.cert}",
            "--kubelet-preferred-address-types=InternalIP",
            f"--cert-dir={self.directory / 'pki' / 'apiserver'}",
            "--profiling=false",
            "--v=1",
            *self.apiserver_extra_args,
        ]

    def _component_common(self, name: str, pki: pki_module.Pki) -> list[str]:
        kubeconfig = self.directory / f"{name}.kubeconfig"
        pair = pki.clients[name]
        return [
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={self.ports[name]}",
            f"--tls-cert-file={pair.cert}",
            f"--tls-private-key-file={pair.key}",
            "--leader-elect=false",
            "--profiling=false",
            "--v=1",
        ]

    def _controller_manager_args(self, pki: pki_module.Pki) -> list[str]:
        return [
            *self._component_common("kube-controller-manager", pki),
            "--controllers=*",
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={pki.service_account_key}",
            f"--root-ca-file={pki.ca.cert}",
            f"--cluster-signing-cert-file={pki.ca.cert}",
            f"--cluster-signing-key-file={pki.ca.key}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--allocate-node-cidrs=false",
            "--configure-cloud-routes=false",
        ]

    def _scheduler_args(self, pki: pki_module.Pki) -> list[str]:
        return self._component_common("kube-scheduler", pki)

    def _kwok_args(self, node: str, config: Path) -> list[str]:
        # One KWOK process per node, as one kubelet per node: stopping it stops that node's
        # heartbeats (its Lease) and nothing else. The node's status advertises the port of the
        # harness's kubelet front (see .kubeletfront), which passes only container-log requests
        # on to KWOK's own server here: KWOK can only exec on this machine, which a test must
        # never do, so exec, attach and port-forward never reach it (and it has no exec target).
        return [
            f"--kubeconfig={self.directory / 'kwok.kubeconfig'}",
            f"--config={config}",
            f"--manage-single-node={node}",
            "--node-ip=127.0.0.1",
            f"--node-port={self.ports[KUBELET_PREFIX + node]}",
            f"--server-address=127.0.0.1:{self.ports[KWOK_PREFIX + node]}",
            f"--enable-crds={','.join(KWOK_CRDS)}",
            "--node-lease-duration-seconds=40",
            "--cidr=10.244.0.1/16",
        ]

    # -- processes ------------------------------------------------------------------------------

    def _launch(self, name: str, args: list[str]) -> None:
        log = self.log_path(name).open("ab")
        try:
            proc = subprocess.Popen(
                [self.binary(name), *args],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.directory,
                env=_environment(name),
                start_new_session=True,
            )
        finally:
            log.close()
        self._procs[name] = proc
        self.pids[name] = proc.pid
        self.args[name] = args
        self._write_state()

    def _write_state(self) -> None:
        state = {
            "bin_dir": str(self.bin_dir.resolve()),
            "ports": self.ports,
            "pids": self.pids,
            "args": self.args,
            "scenario": self.scenario.to_dict(),
            "server": self.server if "kube-apiserver" in self.ports else None,
        }
        # Replaced whole, never truncated in place: the harness reads it as it starts, while this
        # process goes on launching (a read of a half-written file failed the harness).
        partial = self.state_file.with_suffix(".json.partial")
        partial.write_text(json.dumps(state, indent=2))
        os.replace(partial, self.state_file)

    def _died(self, name: str) -> str | None:
        if name.startswith(KWOK_PREFIX) and self.lost_marker(name[len(KWOK_PREFIX) :]).exists():
            return None
        proc = self._procs.get(name)
        if proc is not None:
            code = proc.poll()
            if code is None:
                return None
        elif _alive(self.pids[name], self.binary(name)):
            return None
        else:
            code = None
        tail = self.log_path(name).read_text(errors="replace").strip().splitlines()[-40:]
        in_use = next((line for line in tail if "address already in use" in line), None)
        if in_use:
            return (
                f"controlplane: {name} could not bind its port (address already in use); "
                "run 'make cluster-down' or stop what holds it, then retry"
            )
        last = next((line for line in reversed(tail) if line.strip()), "(no output)")
        return f"controlplane: {name} exited ({code}); see {self.log_path(name)}: {last[:300]}"

    def _wait(self, name: str, deadline: float, ready: Callable[[], bool]) -> None:
        delay = 0.05
        while True:
            for component in self.pids:
                problem = self._died(component)
                if problem:
                    raise ControlPlaneError(problem)
            with contextlib.suppress(Exception):
                if ready():
                    return
            if time.monotonic() > deadline:
                raise ControlPlaneError(
                    f"controlplane: {name} was not ready in time; see {self.log_path(name)}"
                )
            time.sleep(delay)
            delay = min(delay * 1.5, 0.5)

    def _etcd_healthy(self) -> bool:
        with urllib.request.urlopen(f"{self.etcd_url}/health", timeout=2) as resp:
            return bool(json.loads(resp.read()).get("health") == "true")

    def _https_ok(self, name: str, path: str) -> bool:
        pki = self.directory / "pki"
        context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        context.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        try:
            with urllib.request.urlopen(
                f"https://127.0.0.1:{self.ports[name]}{path}", context=context, timeout=3
            ) as resp:
                return bool(resp.status == 200)
        except urllib.error.HTTPError:
            return False

    # -- what tests do to a running control plane --------------------------------------------------

    def etcd_revision(self) -> int:
        """etcd's current revision (through etcd's own JSON gateway)."""
        return int(self._etcd_call("/v3/kv/range", {"key": "AA==", "limit": 1})["header"]["revision"])

    def compact_etcd(self, revision: int | None = None) -> int:
        """Compact etcd's history up to ``revision`` (default: now), as the API server does every
        five minutes; returns the revision compacted to."""
        rev = revision if revision is not None else self.etcd_revision()
        self._etcd_call("/v3/kv/compaction", {"revision": str(rev), "physical": True})
        return rev

    def _etcd_call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(
            f"{self.etcd_url}{path}",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=30) as resp:
            answer: dict[str, Any] = json.loads(resp.read())
        return answer

    def restart(self, name: str, timeout: float = 120.0) -> None:
        """Stop one component and start it again with the same arguments; returns once it is ready
        (an API server restart drops every watch and rebuilds its watch cache from etcd)."""
        self._stop_one(name, grace=10.0)
        if name.startswith(KWOK_PREFIX):  # the node's "kubelet" is back
            self.lost_marker(name[len(KWOK_PREFIX) :]).unlink(missing_ok=True)
        self._launch(name, self.args[name])
        deadline = time.monotonic() + timeout
        if name == "kube-apiserver":
            self._wait(name, deadline, functools.partial(self._https_ok, name, "/readyz"))
        elif name in ("kube-controller-manager", "kube-scheduler"):
            self._wait(name, deadline, functools.partial(self._https_ok, name, "/healthz"))
        elif name == "etcd":
            self._wait(name, deadline, self._etcd_healthy)

    # -- stop -----------------------------------------------------------------------------------

    @classmethod
    def _from_state(cls, directory: Path) -> ControlPlane:
        state = json.loads((directory / "state.json").read_text())
        cp = cls(directory, Path(state["bin_dir"]))
        cp.ports = {k: int(v) for k, v in state.get("ports", {}).items()}
        cp.pids = {k: int(v) for k, v in state.get("pids", {}).items()}
        return cp

    @classmethod
    def stop_in(cls, directory: Path) -> list[str]:
        """Stop the control plane whose state is in ``directory`` and remove the folder."""
        if not (directory / "state.json").exists():
            shutil.rmtree(directory, ignore_errors=True)
            return []
        cp = cls._from_state(directory)
        stopped = cp.running()
        cp.stop()
        return stopped

    def stop(self, grace: float = 10.0) -> None:
        """Stop every component (newest first) and remove the folder; safe to call twice."""
        nodes = [name for name in self.pids if name.startswith(KWOK_PREFIX)]
        for name in (HARNESS, *nodes, *reversed(CORE)):
            self._stop_one(name, grace)
        self.pids.clear()
        self._procs.clear()
        shutil.rmtree(self.directory, ignore_errors=True)

    def _stop_one(self, name: str, grace: float) -> None:
        pid = self.pids.get(name)
        if pid is None:
            return
        proc = self._procs.pop(name, None)
        if proc is not None:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(grace)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            return
        if not _alive(pid, self.binary(name)):
            return
        os.kill(pid, signal.SIGTERM)
        end = time.monotonic() + grace
        while _alive(pid, self.binary(name)) and time.monotonic() < end:
            time.sleep(0.1)
        if _alive(pid, self.binary(name)):
            os.kill(pid, signal.SIGKILL)

    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def logs(self) -> Iterator[tuple[str, Path]]:
        for name in self.pids:
            yield name, self.log_path(name)

    def state(self) -> dict[str, Any]:
        return {"server": self.server, "kubeconfig": str(self.kubeconfig), "pids": dict(self.pids)}
