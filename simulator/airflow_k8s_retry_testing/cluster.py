"""``FakeCluster``: the simulator as a context manager, served from a background thread.

The API server, scheduler and kubelet share one event loop in their own thread, so synchronous
tests, asynchronous tests running another loop, and Airflow subprocesses (through the written
kubeconfig) all talk to the same cluster over real HTTP. The accessors here are safe to call from
any thread; they read consistent copies under the store's lock.
"""

from __future__ import annotations

import asyncio
import collections
import copy
import secrets as token_source
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from airflow_k8s_retry_testing import seeds
from airflow_k8s_retry_testing.scenario import DISRUPTION_KINDS, Fault, Scenario, ScenarioError

if TYPE_CHECKING:
    from airflow_k8s_retry_testing.simclock import SimClock
    from airflow_k8s_retry_testing.timers import ManualTime

T = TypeVar("T")

CLOCKS = ("scaled", "manual")


class FakeCluster:
    """A Kubernetes API server with a scripted kubelet, on ``127.0.0.1``.

    :param scenario: a :class:`Scenario`, a dict, a path to a YAML/JSON file, or None for defaults.
    :param port: TCP port, 0 for a free one.
    :param audit: path of an audit file (one JSON line per request and per pod lifecycle change).
    :param time_scale: real seconds per simulated second; overrides the scenario's ``time_scale``.
    :param clock: ``"scaled"`` (the default): simulated time runs at ``time_scale``. ``"manual"``:
        it stands still until :meth:`advance` runs every scripted step due by then (pods, nodes,
        Jobs, disruptions) in due order; one due at once runs in the advance, or on the next turn.
        Watch ``timeoutSeconds`` and ``bookmark_interval`` (default 60) count simulated seconds too.
        The ``slow`` fault's delay (client timeouts are real) and the timestamps written into
        objects, Events, logs and the audit stay on real time. ``time_scale`` may not be given (it
        reads 1); :meth:`sim_clock`, :meth:`sim_seconds` and :meth:`real_seconds` raise.
    :param token: the bearer token with full access (random by default).
    :param kubeconfig: where to write the kubeconfig (a temporary file by default).
    :param bookmark_interval: real seconds between watch bookmarks (default 60 simulated seconds).
    :param history: how many changes a watch can resume across before 410 Gone.
    :param tls: serve HTTPS with a throw-away CA written into the kubeconfig. ``kubectl`` needs it:
        client-go sends bearer tokens only over TLS. The Python clients work either way.

    Example:
        >>> import kubernetes
        >>> scenario = {"images": {"ghost:1": {"pull": "not_found"}}}
        >>> with FakeCluster(scenario, time_scale=0.01) as cluster:
        ...     client = kubernetes.config.new_client_from_config(str(cluster.kubeconfig))
        ...     kubernetes.client.CoreV1Api(client).list_namespaced_pod("default").items
        []
    """

    def __init__(
        self,
        scenario: Scenario | Mapping[str, Any] | str | Path | None = None,
        *,
        port: int = 0,
        audit: str | Path | None = None,
        time_scale: float | None = None,
        token: str | None = None,
        kubeconfig: str | Path | None = None,
        bookmark_interval: float | None = None,
        history: int = 20_000,
        tls: bool = False,
        clock: Literal["scaled", "manual"] = "scaled",
    ) -> None:
        self.scenario = Scenario.coerce(scenario)
        if clock not in CLOCKS:
            raise ValueError(f"clock: use one of {', '.join(CLOCKS)}, got {clock!r}")
        self.clock_mode = clock
        self._manual: ManualTime | None = None
        if clock == "manual":
            if time_scale is not None:
                raise ValueError("time_scale: a manual clock has no pace; advance() moves it")
            self.time_scale = 1.0  # the timebase counts simulated seconds
        elif time_scale is not None:
            if time_scale <= 0:
                raise ScenarioError(f"time_scale: must be greater than 0, got {time_scale}")
            self.time_scale = float(time_scale)
        else:
            self.time_scale = self.scenario.time_scale
        self.port = port
        self.token = token or token_source.token_urlsafe(24)
        self.audit_path = Path(audit) if audit is not None else None
        self._kubeconfig_target = Path(kubeconfig) if kubeconfig is not None else None
        self.bookmark_interval = (
            bookmark_interval if bookmark_interval is not None else 60.0 * self.time_scale
        )
        self.history = history
        self.tls = tls
        self._cert: Any = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self._startup_error: BaseException | None = None
        self._tmpdir: Path | None = None
        self.url = ""
        self.kubeconfig = Path()
        self._stop_event: asyncio.Event | None = None

    # -- lifecycle ---------------------------------------------------------------------------------

    def __enter__(self) -> FakeCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Start serving; returns once the port is bound and the kubeconfig written."""
        from airflow_k8s_retry_testing.store import Audit, Store

        if self._thread is not None:
            raise RuntimeError("this FakeCluster is already running; use a new instance")
        self._audit = Audit(self.audit_path)
        self.store = Store(history=self.history, audit=self._audit)
        self._tmpdir = Path(tempfile.mkdtemp(prefix="fake-cluster-"))
        if self.tls:
            from airflow_k8s_retry_testing.tls import make_serving_cert

            self._cert = make_serving_cert(self._tmpdir / "pki")
        self._thread = threading.Thread(target=self._serve, name="fake-cluster", daemon=True)
        self._thread.start()
        self._ready.wait(timeout=30)
        if self._startup_error is not None or not self._ready.is_set():
            error = self._startup_error
            self._thread = None
            self._audit.close()
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            if error is not None:
                raise RuntimeError(f"FakeCluster could not start on port {self.port}: {error}") from error
            raise RuntimeError("FakeCluster did not start within 30 s")
        self.kubeconfig = self.write_kubeconfig(self._kubeconfig_target or self._tmpdir / "kubeconfig")

    def stop(self) -> None:
        """Close every stream, stop the server thread and remove temporary files."""
        if self._thread is None or self._loop is None:
            return
        loop = self._loop
        if self._stop_event is not None:
            loop.call_soon_threadsafe(self._stop_event.set)
        self._thread.join(timeout=30)
        self._thread = None
        self._audit.close()
        if self._tmpdir is not None:
            shutil.rmtree(self._tmpdir, ignore_errors=True)

    def _serve(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._main())
        except BaseException as exc:  # reported to the starting thread
            self._startup_error = exc
            self._ready.set()
        finally:
            loop.close()

    async def _main(self) -> None:
        from aiohttp import web

        from airflow_k8s_retry_testing.apiserver.gates import FaultSlot
        from airflow_k8s_retry_testing.apiserver.server import ApiServer
        from airflow_k8s_retry_testing.controllers.components import Components
        from airflow_k8s_retry_testing.controllers.jobs import JobController
        from airflow_k8s_retry_testing.timers import ManualTime, TimerHeap

        loop = asyncio.get_running_loop()
        self._stop_event = asyncio.Event()
        if self.clock_mode == "manual":
            self._manual = ManualTime(loop)
        self.clock = TimerHeap(self._manual or loop, self.time_scale)
        self.components = Components(self.store, self.scenario, self.clock)  # watches the store
        self._faults = [FaultSlot(f, f.times) for f in self.scenario.faults]
        self.api = ApiServer(
            self.store,
            self.components.kubelet,
            token=self.token,
            bookmark_interval=self.bookmark_interval,
            faults=self._faults,
            timebase=self.clock.loop,
            minor_version=self.scenario.minor_version,
        )
        seeds.seed(self.store, self.scenario, [node.spec for node in self.components.nodes])
        self.job_controller = JobController(self.store, self.clock)
        self.job_controller.start()
        runner = web.AppRunner(self.api.app(), access_log=None, handle_signals=False, shutdown_timeout=1.0)
        await runner.setup()
        ssl_context = self._cert.server_context() if self._cert is not None else None
        site = web.TCPSite(runner, "127.0.0.1", self.port, backlog=1024, ssl_context=ssl_context)
        await site.start()
        server = getattr(site, "_server", None)
        sockets = getattr(server, "sockets", None) or []
        self.port = sockets[0].getsockname()[1]
        self.url = f"{'https' if ssl_context else 'http'}://127.0.0.1:{self.port}"
        self.api.host = f"127.0.0.1:{self.port}"
        self._ready.set()
        await self._stop_event.wait()
        await self.job_controller.stop()
        self.components.stop()
        self.api.stopping.set()
        await asyncio.sleep(0)
        await runner.cleanup()

    # -- running code on the loop --------------------------------------------------------------

    def _call(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on the cluster's loop and return its result (safe from any other thread)."""
        if self._loop is None or self._thread is None:
            raise RuntimeError("FakeCluster is not running; use it as a context manager or call start()")
        if threading.current_thread() is self._thread:
            return fn()
        future: Future[T] = Future()

        def runner() -> None:
            try:
                future.set_result(fn())
            except BaseException as exc:
                future.set_exception(exc)

        self._loop.call_soon_threadsafe(runner)
        return future.result(timeout=30)

    # -- kubeconfig ----------------------------------------------------------------------------

    def write_kubeconfig(
        self, path: str | Path, *, token: str | None = None, namespace: str = "default"
    ) -> Path:
        """Write a kubeconfig for this cluster (with the admin token unless ``token`` is given)."""
        import base64

        import yaml

        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        cluster: dict[str, Any] = {"server": self.url}
        if self._cert is not None:
            cluster["certificate-authority-data"] = base64.b64encode(self._cert.ca_pem).decode()
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake-cluster", "cluster": cluster}],
            "users": [{"name": "fake-user", "user": {"token": token or self.token}}],
            "contexts": [
                {
                    "name": "fake",
                    "context": {"cluster": "fake-cluster", "user": "fake-user", "namespace": namespace},
                }
            ],
            "current-context": "fake",
            "preferences": {},
        }
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        path.chmod(0o600)
        return path

    # -- inspection ----------------------------------------------------------------------------

    def pods(self, namespace: str | None = None) -> list[dict[str, Any]]:
        """Live pods as API JSON (copies), optionally in one namespace."""
        return self.store.copy_items("pods", namespace)

    def pod(self, name: str, namespace: str = "default") -> dict[str, Any] | None:
        """One live pod as API JSON, or None."""
        with self.store.lock:
            obj = self.store.get("pods", namespace, name)
            return copy.deepcopy(obj) if obj is not None else None

    def jobs(self, namespace: str | None = None) -> list[dict[str, Any]]:
        """The ``batch/v1`` Jobs (see ``testing/controllers/jobs.py``), as copies."""
        return self.store.copy_items("jobs", namespace)

    def all_pods(self) -> list[dict[str, Any]]:
        """Every pod ever created, in creation order; deleted ones carry ``"deleted": True``."""
        with self.store.lock:
            return copy.deepcopy(list(self.store.pods_ever.values()))

    def events(self, namespace: str | None = None, *, involved: str | None = None) -> list[dict[str, Any]]:
        """Events (copies), optionally only those about the object named ``involved``."""
        items = self.store.copy_items("events", namespace)
        if involved is not None:
            items = [e for e in items if e["involvedObject"]["name"] == involved]
        return items

    def logs(self, name: str, container: str | None = None, namespace: str = "default") -> str:
        """The log text a container has written so far."""

        def read() -> str:
            pod = self.store.get("pods", namespace, name)
            if pod is None:
                raise KeyError(f"no live pod {namespace}/{name}")
            run = self.components.runs[pod["metadata"]["uid"]]
            c = run.container(container or pod["spec"]["containers"][0]["name"])
            if c is None:
                raise KeyError(f"pod {namespace}/{name} has no container {container!r}")
            return "".join(line + "\n" for _, line in c.logs)

        return self._call(read)

    def request_counts(self) -> collections.Counter[tuple[str, str]]:
        """Requests served so far, keyed by (verb, resource), e.g. ``("watch", "pods")``."""
        with self.store.lock:
            return collections.Counter(self.store.requests)

    def audit_records(self) -> list[dict[str, Any]]:
        """The audit trail so far (the same records as the audit file's lines)."""
        with self._audit.lock:
            return copy.deepcopy(self._audit.records)

    def timer_lag(self) -> list[float]:
        """How late (real seconds) each scripted lifecycle step fired, in firing order."""
        return self._call(lambda: list(self.clock.lags))

    def request_latencies(self) -> list[float]:
        """Server-side handling time (seconds) of each non-streaming request."""
        return self._call(lambda: list(self.api.latencies))

    @property
    def thread_id(self) -> int | None:
        """The OS thread id of the simulator's thread (to measure its CPU use)."""
        return self._thread.native_id if self._thread is not None else None

    @property
    def resource_version(self) -> int:
        """The latest resourceVersion."""
        return self.store.rv

    def sim_clock(self) -> SimClock:
        """A clock for the watching side that runs at this cluster's pace (see :class:`SimClock`)."""
        from airflow_k8s_retry_testing.simclock import SimClock

        return SimClock(self._paced("sim_clock"))

    def sim_seconds(self, real_seconds: float) -> float:
        """Convert real seconds into simulated seconds at this cluster's time scale."""
        return real_seconds / self._paced("sim_seconds")

    def real_seconds(self, sim_seconds: float) -> float:
        """Convert simulated seconds into real seconds at this cluster's time scale."""
        return sim_seconds * self._paced("real_seconds")

    def _paced(self, what: str) -> float:
        if self.clock_mode == "manual":
            raise RuntimeError(f"{what}(): this cluster's clock is manual, it has no pace")
        return self.time_scale

    # -- the manual clock ----------------------------------------------------------------------

    def advance(self, sim_seconds: float) -> int:
        """Move a manual clock forward and run every step due by then (see ``clock``); returns how
        many ran, once they all have. Safe from any thread."""
        if not sim_seconds >= 0:
            raise ValueError(f"advance: time only moves forward, got {sim_seconds!r} seconds")
        manual = self._manual_time("advance")
        return self._call(lambda: manual.advance(sim_seconds))

    @property
    def sim_time(self) -> float:
        """A manual clock's time: the simulated seconds :meth:`advance` has moved it (from 0)."""
        return self._manual_time("sim_time").time()

    def pending_timers(self) -> list[float]:
        """When a manual clock's scheduled steps are due (on :attr:`sim_time`), soonest first."""
        manual = self._manual_time("pending_timers")
        return self._call(manual.pending)

    def _manual_time(self, what: str) -> ManualTime:
        if self._manual is None:
            raise RuntimeError(f"{what}: only a running FakeCluster(clock='manual') has a manual clock")
        return self._manual

    def wait_for(self, predicate: Callable[[FakeCluster], bool], timeout: float) -> bool:
        """Block until ``predicate(cluster)`` is true, re-checking on each state change; False on timeout."""
        deadline = time.monotonic() + timeout
        cond = self.store.changed
        while True:
            with cond:
                seen = self.store.generation
            if predicate(self):
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            with cond:
                if self.store.generation == seen:
                    cond.wait(timeout=remaining)

    # -- changing the world -------------------------------------------------------------------

    def add_fault(
        self,
        verb: str = "*",
        resource: str = "*",
        status: int | str = 500,
        times: int | None = 1,
        delay_seconds: float = 0.0,
    ) -> None:
        """Fail the next ``times`` requests matching verb/resource (``*`` for any) with ``status``.

        ``status`` is 500, 429, 410, 403 (quota on a pod create, the authorizer elsewhere),
        ``"reset"`` (the connection is dropped), ``"lost"`` (served, then the connection is dropped
        before the answer) or ``"slow"`` (served after ``delay_seconds`` real seconds, to exercise
        client timeouts).
        """
        from airflow_k8s_retry_testing.apiserver.gates import FaultSlot

        fault = Fault.from_dict(
            {
                "verb": verb,
                "resource": resource,
                "status": status,
                "times": times,
                "delay_seconds": delay_seconds,
            },
            "add_fault",
        )
        self._call(lambda: self._faults.append(FaultSlot(fault, fault.times)))

    def clear_faults(self) -> None:
        self._call(self._faults.clear)

    def disrupt(self, name: str, kind: str, namespace: str = "default") -> None:
        """Disrupt a live pod right now: ``evict``, ``preempt``, ``node_lost`` or ``delete``; or ``admit``
        it (lift its scheduling gates, as an admission queue does)."""
        if kind not in DISRUPTION_KINDS:
            raise ValueError(f"disrupt(kind={kind!r}): use one of {', '.join(DISRUPTION_KINDS)}")

        def act() -> None:
            pod = self.store.get("pods", namespace, name)
            if pod is None:
                raise KeyError(f"disrupt: no live pod {namespace}/{name}")
            self.components.disrupt(pod, kind)

        self._call(act)

    def exit_container(
        self, name: str, exit_code: int = 0, *, container: str | None = None, namespace: str = "default"
    ) -> None:
        """End a running main container now (``container=None``: the first), with this exit code.

        For tests that decide when a pod's run ends instead of racing its scripted
        ``duration_seconds`` (give the image a long one); the kubelet then reports the exit as if
        the run had ended by itself.
        """

        def act() -> None:
            pod = self.store.get("pods", namespace, name)
            if pod is None:
                raise KeyError(f"exit_container: no live pod {namespace}/{name}")
            if not self.components.exit_container(pod, container, exit_code):
                which = "its first main container" if container is None else f"container {container!r}"
                raise RuntimeError(f"exit_container: {which} of {namespace}/{name} is not running")

        self._call(act)

    def add_secret(
        self, name: str, namespace: str = "default", data: Mapping[str, str] | None = None
    ) -> None:
        """Create (or replace) a Secret; ``data=None`` means any key looked up in it exists."""
        self._call(lambda: seeds.put_data(self.store, "secrets", name, namespace, data))

    def add_configmap(
        self, name: str, namespace: str = "default", data: Mapping[str, str] | None = None
    ) -> None:
        """Create (or replace) a ConfigMap; ``data=None`` means any key looked up in it exists."""
        self._call(lambda: seeds.put_data(self.store, "configmaps", name, namespace, data))

    def add_disruption(
        self, pod_name_prefix: str, after_seconds: float, kind: str, count: int | None = 1
    ) -> None:
        """From now on, disrupt pods created with this name prefix (a scenario ``disruptions`` entry)."""
        import dataclasses

        from airflow_k8s_retry_testing.scenario import Disruption

        disruption = Disruption(pod_name_prefix, float(after_seconds), kind, count)

        def put() -> None:
            self.scenario = dataclasses.replace(
                self.scenario, disruptions=(*self.scenario.disruptions, disruption)
            )
            self.components.add_disruption(self.scenario, disruption)

        self._call(put)

    def set_image(self, ref: str, behaviour: Mapping[str, Any]) -> None:
        """Make (or replace) an image's behaviour from now on, as a scenario's ``images`` entry says.

        Example: ``cluster.set_image("team/job:7", {"pull": "rate_limited", "for_seconds": 120})``.
        """
        import dataclasses

        from airflow_k8s_retry_testing.scenario import ImageBehaviour

        parsed = ImageBehaviour.from_dict(behaviour, f"set_image({ref!r})")

        def put() -> None:
            images = {**self.scenario.images, ref: parsed}
            self.scenario = dataclasses.replace(self.scenario, images=images)
            self.components.scenario = self.scenario

        self._call(put)

    def add_namespace(self, name: str) -> None:
        self._call(
            lambda: None if self.store.get("namespaces", "", name) else seeds.put_namespace(self.store, name)
        )

    def restrict(
        self,
        token: str,
        *,
        verbs: Iterable[str] | None = None,
        resources: Iterable[str] | None = None,
        namespaces: Iterable[str] | None = None,
        user: str = "system:serviceaccount:default:restricted",
    ) -> Path:
        """Accept ``token`` with access limited to verbs/resources (None = any); returns its kubeconfig.

        Anything else answers 403 Forbidden. Resources are e.g. ``pods``, ``pods/log``, ``events``.
        """
        from airflow_k8s_retry_testing.apiserver.gates import Rule

        if token == self.token:
            raise ValueError("restrict(): pick a token other than the cluster's admin token")
        rule = Rule(
            user=user,
            verbs=frozenset(verbs) if verbs is not None else None,
            resources=frozenset(resources) if resources is not None else None,
            namespaces=frozenset(namespaces) if namespaces is not None else None,
        )
        self._call(lambda: self.api.rules.__setitem__(token, rule))
        assert self._tmpdir is not None
        return self.write_kubeconfig(self._tmpdir / f"kubeconfig-{len(self.api.rules)}", token=token)

    def grant(
        self,
        token: str,
        rules: Iterable[Mapping[str, Any]],
        *,
        user: str = "system:serviceaccount:default:restricted",
    ) -> Path:
        """Accept ``token`` with exactly ``rules`` (any one allowing a request lets it through).

        Each rule is ``{"verbs": [...], "resources": [...], "namespaces": [...] or None}``, as a
        Role (``namespaces`` the one it lives in) or a ClusterRole (``None``: every namespace and
        the cluster scope) grants them. Returns the token's kubeconfig.
        """
        from airflow_k8s_retry_testing.apiserver.gates import Rule, RuleSet

        if token == self.token:
            raise ValueError("grant(): pick a token other than the cluster's admin token")
        built = tuple(
            Rule(
                user=user,
                verbs=frozenset(rule["verbs"]),
                resources=frozenset(rule["resources"]),
                namespaces=None if rule.get("namespaces") is None else frozenset(rule["namespaces"]),
            )
            for rule in rules
        )
        self._call(lambda: self.api.rules.__setitem__(token, RuleSet(user=user, rules=built)))
        assert self._tmpdir is not None
        return self.write_kubeconfig(self._tmpdir / f"kubeconfig-{len(self.api.rules)}", token=token)

    def drop_watches(self, resource: str | None = None, *, reset: bool = False) -> int:
        """Cut every open watch (of ``resource``, or all) now, as an apiserver restart or a proxy would.

        The stream ends cleanly, or with ``reset=True`` the connection is reset. Returns how many
        watches were cut; clients are expected to re-watch from the last resourceVersion they saw.
        """

        def cut() -> int:
            hit = [w for w in self.store.watchers if resource is None or w.resource == resource]
            for watcher in hit:
                watcher.reset = reset
                watcher.dropped.set()
            return len(hit)

        return self._call(cut)

    def compact(self) -> None:
        """Drop the watch history: any older resourceVersion now gets 410 Gone."""
        self._call(self.store.compact)
