"""The kubelet: pulls images, checks config, runs containers, restarts them and stops them.

Each step of a pod's life on its node is a timer (``StatusManager.after``), and each step writes
the statuses, conditions and Events a containerd-based kubelet writes, since the classifier
under test reads exactly those strings. The kubelet's part of a graceful deletion is here too:
once it sees the deletion mark in the store (``controllers/components.py`` watches it), it stops
the containers (SIGTERM, then SIGKILL when the grace runs out) and confirms; the API server's part
(``deletionTimestamp``, the grace period, finalizers, a removal without grace) is the pod strategy
in ``apiserver/pods.py``. It also serves what the API server proxies to a node: a container's log
and an exec into it (``apiserver/subresources.py`` declares what it asks).
"""

from __future__ import annotations

import functools
import time
import uuid
from typing import Any

from aiohttp import web

from airflow_k8s_retry_testing.apiserver import pods as pod_strategy
from airflow_k8s_retry_testing.apiserver.errors import ApiError
from airflow_k8s_retry_testing.controllers import registry
from airflow_k8s_retry_testing.controllers.runs import SIDECAR, ContainerRun, PodRun, memory_limit
from airflow_k8s_retry_testing.controllers.scheduler import Scheduler
from airflow_k8s_retry_testing.controllers.shell import run_exec_session
from airflow_k8s_retry_testing.controllers.sources import config_error, missing_volume
from airflow_k8s_retry_testing.controllers.status import StatusManager
from airflow_k8s_retry_testing.scenario import ImageBehaviour
from airflow_k8s_retry_testing.store import Obj, now_iso

# Scripted timings, in simulated seconds.
PULL_SECONDS = 0.2
PULL_FAIL_SECONDS = 0.3
BACKOFF_TRANSITION = 1.0
PULL_BACKOFF_START = 10.0
PULL_BACKOFF_CAP = 300.0
CONFIG_RETRY = 10.0
MOUNT_RETRY_START = 2.0
MOUNT_RETRY_CAP = 120.0
STOP_SECONDS = 0.5
CRASH_BACKOFF_CAP = 300.0


class Kubelet:
    """Every node's kubelet, as one scripted component."""

    def __init__(self, status: StatusManager, scheduler: Scheduler) -> None:
        self.status = status
        self.scheduler = scheduler
        self.first_pull: dict[str, float] = {}  # normalized image -> loop time of first attempt
        self.pullers: dict[str, dict[str, int]] = {}  # image with for_pods -> pod UID -> its rank

    # -- starting a pod ---------------------------------------------------------------------------

    def start_pod(self, run: PodRun) -> None:
        if run.deleting:
            return
        status = self.status
        run.start_time = now_iso()
        status.condition(run, "PodReadyToStartContainers", False)
        if run.init:
            names = " ".join(c.name for c in run.init)
            status.condition(
                run,
                "Initialized",
                False,
                "ContainersNotInitialized",
                f"containers with incomplete status: [{names}]",
            )
        else:
            status.condition(run, "Initialized", True)
        status.not_ready(run)
        status.publish(run, "waiting:ContainerCreating" if not run.init else "waiting:PodInitializing")
        if run.active_deadline is not None:
            status.after(run, run.active_deadline, self.deadline_exceeded, run)
        self.check_volumes(run, MOUNT_RETRY_START)

    def deadline_exceeded(self, run: PodRun) -> None:
        """``activeDeadlineSeconds`` passed since startTime: the kubelet kills the pod and fails it."""
        if run.terminal or run.deleting:
            return
        self.fail_pod(
            run,
            "DeadlineExceeded",
            "Pod was active on the node longer than the specified deadline",
            "deadline_exceeded",
        )

    def fail_pod(self, run: PodRun, reason: str, message: str, change: str) -> None:
        """The kubelet kills every container and fails the pod with a status reason and an event."""
        for c in run.containers:
            c.kill(137)
        run.reason = reason
        run.message = message
        status = self.status
        changes = status.set_phase(run, "Failed")
        status.not_ready(run, "PodFailed")
        self.scheduler.release(run)
        status.event(run, reason, message, warning=True)
        run.cancel_timers()
        status.publish(run, change, *changes)
        if run.deleting:
            # A terminal pod under deletion has nothing left to stop: the kubelet confirms the
            # deletion at once (the timers just cancelled included the deletion's own).
            status.after(run, 0.05, self.finish_delete, run)

    def check_volumes(self, run: PodRun, retry: float) -> None:
        if run.deleting:
            return
        status = self.status
        pod = status.pod(run)
        missing = missing_volume(status.store, pod) if pod is not None else None
        if missing is not None:
            volume, why = missing
            status.event(
                run, "FailedMount", f'MountVolume.SetUp failed for volume "{volume}" : {why}', warning=True
            )
            status.store.lifecycle(
                status.pod(run) or {"metadata": {}}, "failed_mount", volume=volume, message=why
            )
            status.after(run, retry, self.check_volumes, run, min(retry * 2, MOUNT_RETRY_CAP))
            return
        status.condition(run, "PodReadyToStartContainers", True)
        if run.init:
            self.start_container(run, run.init[0])
        else:
            for c in run.main:
                self.start_container(run, c)
        status.publish(run)

    # -- images -----------------------------------------------------------------------------------

    def start_container(self, run: PodRun, c: ContainerRun) -> None:
        """Pull (if needed), check config, create and start one container."""
        if run.deleting:
            return
        assert run.node is not None
        status = self.status
        full = registry.normalize_image(c.image)
        policy = c.spec.get("imagePullPolicy") or ("Always" if full.endswith(":latest") else "IfNotPresent")
        behaviour = status.scenario.image(c.image) or ImageBehaviour()
        if not registry.valid_reference(c.image) or behaviour.pull == "invalid_name":
            self.invalid_image(run, c)
            return
        if policy != "Always" and full in run.node.images:
            status.event(
                run, "Pulled", f'Container image "{c.image}" already present on machine', container=c
            )
            c.image_id = registry.image_id(full)
            self.create_container(run, c)
            return
        status.event(run, "Pulling", f'Pulling image "{c.image}"', container=c)
        clock = status.clock
        now = clock.loop.time()
        first = self.first_pull.setdefault(full, now)
        failing = (
            behaviour.pull != "ok"
            and (behaviour.for_seconds is None or (now - first) < behaviour.for_seconds * clock.scale)
            and (behaviour.for_pods is None or self.puller_rank(full, run.uid) < behaviour.for_pods)
        )
        if failing:
            status.after(run, PULL_FAIL_SECONDS, self.pull_failed, run, c, behaviour.pull)
        else:
            status.after(run, PULL_SECONDS, self.pulled, run, c)

    def puller_rank(self, image: str, uid: str) -> int:
        """Among the pods that pulled ``image``, in the order of their first pull: this pod's place."""
        ranks = self.pullers.setdefault(image, {})
        return ranks.setdefault(uid, len(ranks))

    def invalid_image(self, run: PodRun, c: ContainerRun) -> None:
        message = (
            f'Failed to apply default image tag "{c.image}": '
            f'couldn\'t parse image name "{c.image}": invalid reference format'
        )
        c.state = {"waiting": {"reason": "InvalidImageName", "message": message}}
        self.status.event(run, "InspectFailed", message, warning=True, container=c)
        self.status.event(run, "Failed", "Error: InvalidImageName", warning=True, container=c)
        self.status.publish(run, "waiting:InvalidImageName", container=c.name)

    def pulled(self, run: PodRun, c: ContainerRun) -> None:
        assert run.node is not None
        full = registry.normalize_image(c.image)
        run.node.images.add(full)
        c.image_id = registry.image_id(full)
        took = int(PULL_SECONDS * 1000)
        size = registry.image_size(full)
        self.status.event(
            run,
            "Pulled",
            f'Successfully pulled image "{c.image}" in {took}ms ({took}ms including waiting). '
            f"Image size: {size} bytes.",
            container=c,
        )
        self.create_container(run, c)

    def pull_failed(self, run: PodRun, c: ContainerRun, behaviour: str) -> None:
        status = self.status
        grpc, _ = registry.pull_error(behaviour, c.image)
        c.pull_failures += 1
        c.state = {"waiting": {"reason": "ErrImagePull", "message": grpc}}
        status.event(run, "Failed", f'Failed to pull image "{c.image}": {grpc}', warning=True, container=c)
        status.event(run, "Failed", "Error: ErrImagePull", warning=True, container=c)
        status.publish(run, "waiting:ErrImagePull", container=c.name, message=grpc)
        backoff = min(PULL_BACKOFF_START * 2 ** (c.pull_failures - 1), PULL_BACKOFF_CAP)
        status.after(run, min(BACKOFF_TRANSITION, backoff / 2), self.pull_backoff, run, c, grpc)
        status.after(run, backoff, self.start_container, run, c)

    def pull_backoff(self, run: PodRun, c: ContainerRun, cause: str) -> None:
        status = self.status
        event_message = f'Back-off pulling image "{c.image}"'
        message = event_message
        if status.scenario.minor_version >= 32:
            message += f": ErrImagePull: {cause}"  # 1.32+ kubelets keep the last pull error in the status
        c.state = {"waiting": {"reason": "ImagePullBackOff", "message": message}}
        status.event(run, "BackOff", event_message, container=c)
        status.event(run, "Failed", "Error: ImagePullBackOff", warning=True, container=c)
        status.publish(run, "waiting:ImagePullBackOff", container=c.name, message=message)

    # -- running ----------------------------------------------------------------------------------

    def create_container(self, run: PodRun, c: ContainerRun) -> None:
        if run.deleting:
            return
        status = self.status
        error = config_error(status.store, run.namespace, c.spec)
        if error is not None:
            first = c.state.get("waiting", {}).get("reason") != "CreateContainerConfigError"
            c.state = {"waiting": {"reason": "CreateContainerConfigError", "message": error}}
            status.event(run, "Failed", f"Error: {error}", warning=True, container=c)
            if first:
                status.publish(run, "waiting:CreateContainerConfigError", container=c.name, message=error)
            status.after(run, CONFIG_RETRY, self.create_container, run, c)
            return
        c.container_id = "containerd://" + uuid.uuid4().hex + uuid.uuid4().hex
        status.event(run, "Created", f"Created container: {c.name}", container=c)
        status.event(run, "Started", f"Started container {c.name}", container=c)
        started = now_iso()
        c.state = {"running": {"startedAt": started}}
        c.started = True
        c.ready = not c.init
        c.touch()
        changes = [f"running:{c.name}"]
        if not c.init:
            if all(x.ready for x in run.main):
                status.condition(run, "Ready", True)
                status.condition(run, "ContainersReady", True)
            else:
                status.not_ready(run)
            changes += status.set_phase(run, "Running")
        status.publish(run, *changes, container=c.name)
        if c.name == SIDECAR and not c.init:
            return  # runs until killed through exec, like the real sidecar's sleep loop
        self.script(run, c)

    def script(self, run: PodRun, c: ContainerRun) -> None:
        """Plan what the scenario says the container does: its log lines, then its exit."""
        lines = c.run.log.splitlines()
        duration = c.run.duration_seconds
        if lines:
            groups = min(len(lines), 50)
            per = -(-len(lines) // groups)
            for g in range(groups):
                chunk = lines[g * per : (g + 1) * per]
                if chunk:
                    self.status.after(run, duration * g / groups, self.emit_log, c, chunk)
        if c.run.memory_needed is not None and c.run.memory_needed > memory_limit(c.spec):
            # The kernel kills it when its use crosses the limit, halfway through the run.
            self.status.after(run, duration / 2, self.container_exited, run, c, 137, "OOMKilled")
            return
        self.status.after(
            run, duration, self.container_exited, run, c, c.run.exit_code, "OOMKilled" if c.run.oom else None
        )

    @staticmethod
    def emit_log(c: ContainerRun, lines: list[str]) -> None:
        now = time.time()
        c.logs.extend((now, line) for line in lines)
        c.touch()

    def container_exited(
        self,
        run: PodRun,
        c: ContainerRun,
        exit_code: int,
        reason: str | None = None,
        message: str | None = None,
    ) -> None:
        if not c.running:
            return
        started = c.state["running"]["startedAt"]
        reason = reason or ("Completed" if exit_code == 0 else "Error")
        terminated: Obj = {
            "exitCode": exit_code,
            "reason": reason,
            "startedAt": started,
            "finishedAt": now_iso(),
            "containerID": c.container_id,
        }
        policy = c.spec.get("terminationMessagePolicy")
        if not message and exit_code != 0 and policy == "FallbackToLogsOnError":
            message = fallback_message(c)
        if message:
            terminated["message"] = message
        c.state = {"terminated": terminated}
        c.ready = False
        c.touch()
        changes = [f"terminated:{reason}"]
        extra: dict[str, Any] = {"container": c.name, "exit_code": exit_code}
        pod = self.status.pod(run)
        restart_policy = (pod or {}).get("spec", {}).get("restartPolicy", "Always")
        if c.init:
            self.init_exited(run, c, exit_code, restart_policy=restart_policy, changes=changes, extra=extra)
        else:
            self.main_exited(run, c, exit_code, restart_policy=restart_policy, changes=changes, extra=extra)

    def init_exited(
        self,
        run: PodRun,
        c: ContainerRun,
        exit_code: int,
        *,
        restart_policy: str,
        changes: list[str],
        extra: dict[str, Any],
    ) -> None:
        status = self.status
        if exit_code == 0:
            run.init_done += 1
            if run.init_done < len(run.init):
                status.publish(run, *changes, **extra)
                self.start_container(run, run.init[run.init_done])
                return
            status.condition(run, "Initialized", True)
            for m in run.main:
                m.state = {"waiting": {"reason": "PodInitializing"}}
            status.publish(run, *changes, **extra)
            for m in run.main:
                self.start_container(run, m)
            return
        if restart_policy != "Never":
            self.schedule_restart(run, c, changes, extra)
            return
        changes += status.set_phase(run, "Failed")
        status.not_ready(run, "PodFailed")
        self.scheduler.release(run)
        status.publish(run, *changes, **extra)

    def main_exited(
        self,
        run: PodRun,
        c: ContainerRun,
        exit_code: int,
        *,
        restart_policy: str,
        changes: list[str],
        extra: dict[str, Any],
    ) -> None:
        status = self.status
        if run.deleting or run.stopped:
            status.publish(run, *changes, **extra)
            return
        if restart_policy == "Always" or (restart_policy == "OnFailure" and exit_code != 0):
            self.schedule_restart(run, c, changes, extra)
            return
        if all(x.terminated for x in run.main):
            failed = any(x.state["terminated"]["exitCode"] != 0 for x in run.main)
            changes += status.set_phase(run, "Failed" if failed else "Succeeded")
            status.not_ready(run, "PodFailed" if failed else "PodCompleted")
            self.scheduler.release(run)
        else:
            status.not_ready(run)
        status.publish(run, *changes, **extra)

    def schedule_restart(
        self, run: PodRun, c: ContainerRun, changes: list[str], extra: dict[str, Any]
    ) -> None:
        c.last_state = c.state
        c.previous_logs, c.logs = c.logs, []
        c.restart_count += 1
        delay = c.crash_backoff
        c.crash_backoff = min(c.crash_backoff * 2, CRASH_BACKOFF_CAP)
        c.state = {
            "waiting": {
                "reason": "CrashLoopBackOff",
                "message": f"back-off {int(delay)}s restarting failed container={c.name} "
                f"pod={run.name}_{run.namespace}({run.uid})",
            }
        }
        status = self.status
        status.event(
            run,
            "BackOff",
            f"Back-off restarting failed container {c.name} in pod {run.name}_{run.namespace}({run.uid})",
            warning=True,
            container=c,
        )
        status.not_ready(run)
        status.publish(run, *changes, "waiting:CrashLoopBackOff", **extra)
        status.after(run, delay, self.create_container, run, c)

    # -- exec support -----------------------------------------------------------------------------

    def kill(self, run: PodRun, c: ContainerRun, signal: int) -> int | None:
        """Signal a container's main process from exec; returns its exit code if it stopped."""
        if not c.running or run.frozen:
            return None
        # The XCom sidecar traps SIGINT and exits 0; anything else dies of the signal.
        code = 0 if c.name == SIDECAR and signal == 2 else 128 + signal
        self.status.clock.later(0.0, self.container_exited, run, c, code)
        return code

    # -- what the API server proxies to the node ---------------------------------------------------

    def container_log(self, pod: Obj, container: str, *, previous: bool) -> ServedLog:
        """``pods/log``: the container's log, or the kubelet's 400 when there is none to read."""
        run = self.status.runs.get(pod["metadata"]["uid"])
        c = run.container(container) if run is not None else None
        name = pod["metadata"]["name"]
        if run is None or c is None:
            raise ApiError(400, f"container {container} is not valid for pod {name}")
        if previous and c.previous_logs is None:
            raise ApiError(400, f'previous terminated container "{container}" in pod "{name}" not found')
        if not c.started:
            reason = (c.state.get("waiting") or {}).get("reason", "ContainerCreating")
            raise ApiError(400, f'container "{container}" in pod "{name}" is waiting to start: {reason}')
        return ServedLog(run, c)

    def exec_session(self, pod: Obj, container: str) -> ServedExec:
        """``pods/exec``: a session in the running container, or the kubelet's 400."""
        run = self.status.runs.get(pod["metadata"]["uid"])
        c = run.container(container) if run is not None else None
        if run is None or c is None:
            raise ApiError(400, f"container {container} is not valid for pod {pod['metadata']['name']}")
        if not c.running or run.frozen:
            raise ApiError(400, f'unable to upgrade connection: container not found ("{container}")')
        return ServedExec(run, functools.partial(self.kill, run, c))

    # -- deletion ---------------------------------------------------------------------------------

    def delete(self, pod: Obj, grace: int) -> None:
        """The pod was marked for deletion: stop the containers, then confirm (unless finalizers)."""
        run = self.status.runs.get(pod["metadata"]["uid"])
        if run is None or run.gone:
            return
        first = not run.deleting
        run.deleting = True
        if grace == 0:
            self.finish_delete(run, force=True)
            return
        if run.frozen:
            return  # nobody on the node confirms; the pod GC removes it later
        if not run.started_on_node:
            self.status.after(run, 0.01, self.finish_delete, run)
            return
        if first:
            for c in run.containers:
                if c.running:
                    self.status.event(run, "Killing", f"Stopping container {c.name}", container=c)
            stop = max(
                (c.run.stop_seconds for c in run.containers if c.running and c.run.stop_seconds is not None),
                default=STOP_SECONDS,
            )
            self.status.after(run, min(stop, float(grace)), self.stop_containers, run)

    def stop_containers(self, run: PodRun) -> None:
        run.stopped = True
        changes: list[str] = []
        for c in run.containers:
            if c.kill(143):
                changes.append(f"terminated:Error:{c.name}")
            elif "waiting" in c.state:
                c.lost("The container could not be located when the pod was terminated")
        failed = any((x.state.get("terminated") or {}).get("exitCode", 1) != 0 for x in run.main)
        status = self.status
        changes += status.set_phase(run, "Failed" if failed else "Succeeded")
        status.not_ready(run, "PodFailed" if failed else "PodCompleted")
        self.scheduler.release(run)
        status.publish(run, *changes)
        status.after(run, 0.05, self.finish_delete, run)

    def finish_delete(self, run: PodRun, force: bool = False) -> None:
        """Confirm the deletion: the object goes, unless a finalizer still holds it."""
        pod = self.status.pod(run)
        if pod is None or pod["metadata"]["uid"] != run.uid:
            return
        if not force and pod_strategy.held_by_finalizers(pod):
            return  # removed when the last finalizer goes (see finalizers_changed)
        self.remove(run)

    def finalizers_changed(self, pod: Obj) -> None:
        run = self.status.runs.get(pod["metadata"]["uid"])
        if run is None or not run.deleting or pod_strategy.held_by_finalizers(pod):
            return
        if run.frozen or run.stopped or not run.started_on_node or run.phase == "Unknown":
            self.status.clock.later(0.0, self.finish_delete, run)

    def remove(self, run: PodRun) -> None:
        """The pod object goes for good (a confirmed deletion or the pod GC's)."""
        pod = self.status.pod(run)
        run.cancel_timers()
        self.scheduler.forget(run)
        if pod is not None and pod["metadata"]["uid"] == run.uid:
            pod_strategy.remove(self.status.store, pod)
        self._gone(run)

    def removed(self, uid: str) -> None:
        """The object went without this kubelet confirming (a deletion without grace): what still
        runs stops, and the node's share is given back."""
        run = self.status.runs.get(uid)
        if run is None or run.gone:
            return
        run.cancel_timers()
        self.scheduler.forget(run)
        self._gone(run)

    @staticmethod
    def _gone(run: PodRun) -> None:
        run.gone = True
        for c in run.containers:
            c.touch()


def fallback_message(c: ContainerRun) -> str:
    """``terminationMessagePolicy: FallbackToLogsOnError`` with no message file: as the kubelet, the
    end of the container's log, at most 80 lines and 2048 bytes, whichever is smaller."""
    text = "\n".join(line for _, line in c.logs[-80:])
    data = text.encode()[-2048:]
    return data.decode(errors="ignore")


class ServedLog:
    """A container's log as the kubelet serves it to the API server (``pods/log``)."""

    def __init__(self, run: PodRun, container: ContainerRun) -> None:
        self._run = run
        self._container = container

    @property
    def lines(self) -> list[tuple[float, str]]:
        return self._container.logs

    @property
    def previous(self) -> list[tuple[float, str]] | None:
        return self._container.previous_logs

    @property
    def ended(self) -> bool:
        return self._container.terminated or self._run.gone

    async def changed(self) -> None:
        await self._container.changed.wait()


class ServedExec:
    """An exec into a running container (``pods/exec``): the shell of ``controllers/shell.py``,
    whose ``kill`` signals the container's main process through the kubelet."""

    def __init__(self, run: PodRun, signal: functools.partial[int | None]) -> None:
        self._run = run
        self._signal = signal

    async def run(self, ws: web.WebSocketResponse, command: list[str], *, stdin: bool) -> None:
        await run_exec_session(ws, self._run, command, stdin=stdin, signal=self._signal)
