"""The one model of Airflow the chaos suite drives the operator and the trigger through.

Everything Airflow does around a deferrable task, and nothing else, lives here, written after
Airflow 3.3.2's own code so the harness keeps working whatever the operator looks like inside:

- the task instance and the context the task runner passes (``RuntimeTaskInstance`` attributes,
  ``get_template_context`` keys);
- a deferral: ``TaskDeferred`` carries a trigger whose ``serialize()`` kwargs are stored through
  Airflow's own serializer and rebuilt in a triggerer as ``trigger_class(**kwargs)``; the first event's
  payload becomes ``next_kwargs["event"]``, and the worker resumes through
  ``resume_execution(next_method, next_kwargs, context)`` on a freshly parsed operator;
- a deferral timeout: ``next_method="__fail__"`` with ``TriggerFailureReason.TRIGGER_TIMEOUT``;
- a triggerer (``triggerer_job_runner.TriggerRunner.run_trigger``): a trigger no longer assigned to
  it is cancelled with the user-action message, which calls ``on_kill`` (30 s limit) and then
  ``cleanup``; a graceful shutdown cancels without the message (no ``on_kill``); ``kill -9`` runs
  nothing;
- the worker: SIGTERM calls ``task.on_kill()`` (``task_runner._on_term``) and returns, so the
  task's code goes on until it ends or the supervisor's SIGKILL comes 5 s later; ``kill -9`` runs
  nothing more; a crashed or killed worker's try is failed by the scheduler's heartbeat check;
- ``execution_timeout`` in the worker (``task_runner._run_execute_callable``): a SIGALRM raises
  ``AirflowTaskTimeout`` wherever the code is, in ``execute`` and again in the resumed method;
  when it leaves the task's code, ``task.on_kill()`` runs and the try fails as any other error;
- the retry rule (``TaskInstance.is_eligible_to_retry`` and the task runner's exception handling);
- what ``on_kill`` in the trigger reads: ``RuntimeTaskInstance.get_task_states`` answers from this
  model's task states (an empty map once the DAG run is deleted, as the execution API does);
- the api-server's side of a user's "mark failed" (``services.public.task_instances``): inside the
  request that sets the state, the ``on_task_instance_failed`` listeners run with
  ``previous_state=None`` and the task instance, whose ``trigger_id`` and trigger row
  (``Trigger.classpath``, ``Trigger.kwargs``) are still there while it is deferred; once its trigger
  fired (``Trigger.submit_event``: ``scheduled``, ``trigger_id`` cleared, the event in
  ``next_kwargs`` through ``airflow.sdk.serde``) until the try ends, the listeners see that
  instead, and for a running task its rendered template fields; deleting a DAG run calls no
  listener.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.chaos.scheduler import SimClock

#: The triggerer's limit on ``on_kill`` (``[triggerer] on_kill_timeout``, default 30 s).
ON_KILL_TIMEOUT = 30.0


# -- the task instance and its context -------------------------------------------------------------


@dataclass
class TaskInstance:
    """The attributes of Airflow's ``RuntimeTaskInstance`` a task can read, and ``xcom_push``."""

    dag_id: str
    task_id: str
    run_id: str
    try_number: int
    max_tries: int
    start_date: datetime
    map_index: int = -1
    id: uuid.UUID = field(default_factory=uuid.uuid4)  # new for every try (Airflow 3)
    state: str | None = "running"
    hostname: str = "chaos-worker"
    xcom: dict[str, Any] = field(default_factory=dict)
    task: Any = None
    #: Set by the worker model: called before every XCom push (a dead worker pushes nothing).
    boundary: Callable[[str], None] | None = None
    #: The XCom push (1-based, in this try) that the API server answers with a 503, if any.
    xcom_fails_at: int | None = None
    xcom_pushes: int = 0

    def xcom_push(self, key: str, value: Any) -> None:
        if self.boundary is not None:
            self.boundary(f"xcom_push:{key}")
        self.xcom_pushes += 1
        if self.xcom_pushes == self.xcom_fails_at:
            # What the task runner raises when the supervisor's call to the execution API fails.
            from airflow.sdk.execution_time.comms import ErrorResponse

            from airflow_k8s_retry.compat import AirflowRuntimeError, ErrorType

            raise AirflowRuntimeError(
                ErrorResponse(error=ErrorType.API_SERVER_ERROR, detail={"status_code": 503, "key": key})
            )
        self.xcom[key] = value

    def xcom_pull(self, task_ids: Any = None, key: str = "return_value", **_: Any) -> Any:
        return self.xcom.get(key)


@dataclass
class DagRun:
    dag_id: str
    run_id: str
    logical_date: datetime
    conf: dict[str, Any] = field(default_factory=dict)
    run_type: str = "manual"


class Dag:
    """The bits of a DAG object a task's context exposes."""

    def __init__(self, dag_id: str) -> None:
        self.dag_id = dag_id
        self.fileloc = f"/dags/{dag_id}.py"
        self.params: dict[str, Any] = {}


def context_for(ti: TaskInstance, dag_run: DagRun, task: Any) -> dict[str, Any]:
    """The template context the task runner hands to ``execute`` and ``resume_execution``."""
    ti.task = task
    return {
        "ti": ti,
        "task_instance": ti,
        "task": task,
        "dag": Dag(ti.dag_id),
        "dag_run": dag_run,
        "run_id": ti.run_id,
        "logical_date": dag_run.logical_date,
        "ds": dag_run.logical_date.strftime("%Y-%m-%d"),
        "ts": dag_run.logical_date.isoformat(),
        "params": {},
        "conf": None,
        "map_index_template": None,
        "try_number": ti.try_number,
        "inlets": [],
        "outlets": [],
    }


# -- serialization: what the metadata database keeps ----------------------------------------------


def through_database(value: dict[str, Any]) -> dict[str, Any]:
    """Store and load ``value`` the way Airflow stores trigger kwargs and ``next_kwargs``."""
    from airflow.serialization.serialized_objects import BaseSerialization

    loaded = BaseSerialization.deserialize(BaseSerialization.serialize(value))
    assert isinstance(loaded, dict)
    return loaded


@dataclass
class Deferral:
    """A ``TaskDeferred`` as the task runner records it."""

    classpath: str
    trigger_kwargs: dict[str, Any]
    next_method: str
    next_kwargs: dict[str, Any]
    timeout: timedelta | None

    @classmethod
    def record(cls, deferred: Any) -> Deferral:
        classpath, kwargs = deferred.trigger.serialize()
        return cls(
            classpath=classpath,
            trigger_kwargs=through_database(dict(kwargs)),
            next_method=deferred.method_name,
            next_kwargs=through_database(dict(deferred.kwargs or {})),
            timeout=deferred.timeout,
        )

    def resumed_with(self, payload: Any) -> tuple[str, dict[str, Any]]:
        """``(next_method, next_kwargs)`` once the trigger fired ``payload``."""
        return self.next_method, through_database({**self.next_kwargs, "event": payload})

    @staticmethod
    def timed_out() -> tuple[str, dict[str, Any]]:
        from airflow.sdk.bases.operator import TRIGGER_FAIL_REPR, TriggerFailureReason

        return TRIGGER_FAIL_REPR, {"error": TriggerFailureReason.TRIGGER_TIMEOUT}


def build_trigger(classpath: str, kwargs: dict[str, Any]) -> Any:
    """``TriggerRunner.get_trigger_by_classpath`` then ``trigger_class(**kwargs)``."""
    module, _, name = classpath.rpartition(".")
    return getattr(importlib.import_module(module), name)(**kwargs)


# -- the retry rule ----------------------------------------------------------------------------------


def state_after(error: BaseException | None, ti: TaskInstance, retries: int) -> str:
    """The state Airflow gives a try that returned (``error=None``) or raised ``error``."""
    from airflow_k8s_retry.compat import AirflowFailException, AirflowSkipException

    if error is None:
        return "success"
    if isinstance(error, AirflowSkipException):
        return "skipped"
    if isinstance(error, AirflowFailException):
        return "failed"
    return "up_for_retry" if retries and ti.try_number <= ti.max_tries else "failed"


# -- the task states on_kill reads -------------------------------------------------------------------


class TaskStates:
    """What the execution API's ``GET /task-instances/states`` answers, per (dag, run, task)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: (dag_id, run_id) -> (task_id, map_index) -> (state, try number), as the table's rows.
        self._rows: dict[tuple[str, str], dict[tuple[str, int], tuple[str | None, int]]] = {}

    def set(self, ti: TaskInstance, state: str | None) -> None:
        ti.state = state
        with self._lock:
            rows = self._rows.setdefault((ti.dag_id, ti.run_id), {})
            rows[(ti.task_id, ti.map_index)] = (state, ti.try_number)

    def state_of(self, ti: Any) -> tuple[str | None, int] | None:
        """The metadata database's row for the task instance now: (state, try number), or None."""
        with self._lock:
            return self._rows.get((ti.dag_id, ti.run_id), {}).get((ti.task_id, ti.map_index))

    def delete_run(self, dag_id: str, run_id: str) -> None:
        with self._lock:
            self._rows.pop((dag_id, run_id), None)

    def get_task_states(
        self,
        dag_id: str,
        map_index: int | None = None,
        task_ids: list[str] | None = None,
        task_group_id: str | None = None,
        logical_dates: Any = None,
        run_ids: list[str] | None = None,
    ) -> dict[str, dict[str, Any]]:
        """As the route does: rows filtered by task id and map index (SQL, not by the key's
        spelling), each keyed ``task_id`` or, for a mapped one, ``f"{task_id}_{map_index}"``."""
        with self._lock:
            out: dict[str, dict[str, Any]] = {}
            for (dag, run), rows in self._rows.items():
                if dag != dag_id or (run_ids is not None and run not in run_ids):
                    continue
                out[run] = {
                    (task if index < 0 else f"{task}_{index}"): state
                    for (task, index), (state, _try) in rows.items()
                    if (not task_ids or task in task_ids) and (map_index is None or index == map_index)
                }
            return out

    @contextlib.contextmanager
    def serving(self) -> Iterator[TaskStates]:
        """Answer ``RuntimeTaskInstance.get_task_states`` (the triggerer's read) from this model."""
        from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

        saved = RuntimeTaskInstance.__dict__["get_task_states"]
        RuntimeTaskInstance.get_task_states = staticmethod(self.get_task_states)
        try:
            yield self
        finally:
            RuntimeTaskInstance.get_task_states = saved


# -- the worker ----------------------------------------------------------------------------------


class WorkerDied(BaseException):
    """The worker process is gone (``kill -9``): nothing after this point runs."""


@dataclass
class CrashPlan:
    """Where the worker dies or is interrupted: at its ``at``-th call across the package's boundary
    (1-based, counted over the try's ``execute`` and resumed method).

    A boundary call is a Kubernetes API request, an XCom push or the hand-over of a deferral.
    ``answer_lost`` lets the request reach the API server before the process dies (the change lands,
    the answer is never read). ``kill`` is a user's "mark failed" while running, landing before
    the call: the worker's supervisor hears of it at its next heartbeat (up to 5 s later), so the
    task's code makes ``unaware`` more calls first (a deferral among them is refused and the
    process ends: no SIGTERM, no ``on_kill``); then the SIGTERM lands while a call is under way
    (sent, its answer not read), ``on_kill()`` runs, and the code goes on for ``goes_on`` more
    calls (the 5 s before the supervisor's SIGKILL) unless it ends first, a deferral among them
    refused. ``alarm`` is ``execution_timeout`` running out there: ``AirflowTaskTimeout`` is
    raised before the request (or, with ``answer_lost``, after it landed).
    """

    at: int
    answer_lost: bool = False
    kill: bool = False
    goes_on: int = 0
    alarm: bool = False
    unaware: int = 0


class Worker:
    """One worker process running one task try: counts boundary calls and dies where planned."""

    _active: threading.local = threading.local()

    def __init__(
        self,
        plan: CrashPlan | None,
        on_kill: Callable[[], None] | None = None,
        user_kill: Callable[[], None] | None = None,
    ) -> None:
        self.plan = plan
        self.calls = 0
        self.dead = False
        self.died_at: str | None = None
        self._on_kill = on_kill
        self._user_kill = user_kill
        self._in_on_kill = False
        #: After the user's kill: the boundary calls before the supervisor hears of it.
        self.unaware: int | None = None
        #: After a SIGTERM: the boundary calls the task's code may still make before SIGKILL.
        self.terminating: int | None = None

    # The Kubernetes client's transport is the boundary: every API call of the task passes here.
    @classmethod
    @contextlib.contextmanager
    def installed(cls) -> Iterator[None]:
        """Count the task's Kubernetes calls while inside (the client's transport, restored after)."""
        from kubernetes.client import rest

        original = rest.RESTClientObject.request

        def request(self: Any, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
            worker: Worker | None = getattr(cls._active, "worker", None)
            if worker is None:
                return original(self, method, url, *args, **kwargs)
            after = worker.before(f"{method} {url.split('?', maxsplit=1)[0]}")
            result = original(self, method, url, *args, **kwargs)
            if after is not None:
                after()
            return result

        rest.RESTClientObject.request = request
        try:
            yield
        finally:
            rest.RESTClientObject.request = original

    def before(self, what: str) -> Callable[[], None] | None:
        """Called at each boundary call, before it goes out. Raises where the process dies (or the
        alarm fires) before the call; returns what happens once the call went out (its answer lost,
        or the alarm), or None."""
        if self.dead:
            raise WorkerDied(f"worker already dead ({self.died_at}); {what} never happens")
        if self._in_on_kill:
            return None
        if self.unaware is not None:
            if what == "defer":
                self.die(f"killed by the user: the deferral was refused, before {what} (no on_kill)")
            if self.unaware == 0:  # the heartbeat: SIGTERM while this call is under way
                self.unaware = None
                return lambda: self.sigterm(what)
            self.unaware -= 1
            return None
        if self.terminating is not None:
            if self.terminating == 0 or what == "defer":
                why = "the task instance is no longer running" if what == "defer" else "SIGKILL"
                self.die(f"killed by the user: {why}, before {what}")
            self.terminating -= 1
            return None
        self.calls += 1
        plan = self.plan
        if plan is None or self.calls != plan.at:
            return None
        if plan.alarm:
            if what == "defer":
                return None  # the deferral is handed over after the alarm's block ended: none fires
            if plan.answer_lost:
                return lambda: self.alarm(f"after {what}")
            self.alarm(f"before {what}")
        if plan.kill and self._on_kill is not None:
            if self._user_kill is not None:
                self._user_kill()  # the task instance is failed; the api-server's listener runs
            self.unaware = plan.unaware
            return self.before(what)
        if plan.answer_lost:
            return lambda: self.die(f"after {what} (answer lost)")
        self.die(f"before {what}")
        return None

    def sigterm(self, what: str) -> None:
        """SIGTERM while ``what`` was under way (sent, its answer not read yet), where a worker's
        main thread spends its time: the handler runs ``on_kill``, then the code reads the answer
        and goes on for ``goes_on`` calls, or is killed at once when that is 0. (The calls are
        counted again only once the SIGTERM came.)"""
        assert self.plan is not None and self._on_kill is not None
        self.run_on_kill(self._on_kill)
        self.terminating = self.plan.goes_on
        if self.terminating == 0:
            self.die(f"killed by the user: SIGKILL during {what}")

    def run_on_kill(self, on_kill: Callable[[], None]) -> None:
        """Run ``on_kill`` in this process: its own calls cross the boundary uncounted."""
        self._in_on_kill = True
        try:
            on_kill()
        finally:
            self._in_on_kill = False

    def alarm(self, where: str) -> None:
        """``execution_timeout`` ran out here: the signal handler raises in the task's code."""
        from airflow_k8s_retry.compat import AirflowTaskTimeout  # a BaseException in Airflow 3.3

        raise AirflowTaskTimeout(f"execution_timeout ran out {where}")

    def die(self, where: str) -> None:
        self.dead = True
        self.died_at = where
        raise WorkerDied(where)

    @contextlib.contextmanager
    def running(self) -> Iterator[Worker]:
        Worker._active.worker = self
        try:
            yield self
        finally:
            Worker._active.worker = None

    def boundary(self, what: str) -> None:
        after = self.before(what)
        if after is not None:
            after()


# -- the api-server -------------------------------------------------------------------------------


class ApiServer:
    """The api-server process: calls this package's listener when a user marks a deferred task
    failed, as ``_emit_state_listener_hooks`` does, with the task instance (its ``trigger_id``
    still set) and its trigger row; the listener's own work runs in its thread, its pauses on the
    run's simulated clock."""

    def __init__(self, states: TaskStates, clock: SimClock) -> None:
        self._states = states
        self._clock = clock
        self._threads: list[threading.Thread] = []

    def mark_failed(self, ti: TaskInstance, trigger_id: int, classpath: str, kwargs: dict[str, Any]) -> None:
        """A user marks a deferred task instance failed: its trigger row is still there."""
        from types import SimpleNamespace

        row = SimpleNamespace(id=trigger_id, classpath=classpath, kwargs=kwargs)
        self._listen(ti, trigger_id=trigger_id, trigger_row=row)

    def mark_failed_waiting(
        self, ti: TaskInstance, next_method: str | None, next_kwargs: dict[str, Any] | None, namespace: str
    ) -> None:
        """A user marks failed a task instance with no trigger: one whose trigger fired and that
        waits for a worker (``scheduled`` or ``queued``) or runs its resumed method, with the event
        in ``next_kwargs`` as the column holds it (``Trigger.submit_event`` stores them through
        ``airflow.sdk.serde``), or one that runs ``execute`` (no ``next_method``); its rendered
        template fields name the namespace."""
        from airflow.sdk.serde import serialize

        self._listen(
            ti,
            trigger_id=None,
            next_method=next_method,
            next_kwargs=serialize(next_kwargs) if next_kwargs is not None else None,
            rendered_fields_of=lambda _: {"namespace": namespace, "kubernetes_conn_id": None},
        )

    def _listen(
        self,
        ti: TaskInstance,
        *,
        trigger_id: int | None,
        trigger_row: Any = None,
        rendered_fields_of: Callable[[Any], dict[str, Any]] | None = None,
        **row: Any,
    ) -> None:
        from types import SimpleNamespace

        from airflow.models.taskinstancekey import TaskInstanceKey

        from airflow_k8s_retry.kills import listener as kills

        orm_ti = SimpleNamespace(
            trigger_id=trigger_id,
            key=TaskInstanceKey(ti.dag_id, ti.task_id, ti.run_id, ti.try_number, ti.map_index),
            id=ti.id,
            dag_id=ti.dag_id,
            task_id=ti.task_id,
            run_id=ti.run_id,
            map_index=ti.map_index,
            try_number=ti.try_number,
            operator="RetryingPodOperator",
            **row,
        )
        thread = kills.kill_deferred_pod(
            orm_ti,
            "failed",
            trigger_row_of=lambda _: trigger_row,
            state_of=self._states.state_of,
            rendered_fields_of=rendered_fields_of or (lambda _: {}),
            sleep=self._clock.sleep,
        )
        if thread is not None:
            self._clock.watch_thread(thread)
            self._threads.append(thread)

    def idle(self, within: float) -> None:
        """Wait (simulated seconds) for the listener's work to end."""
        self._clock.wait_for(lambda: not any(t.is_alive() for t in self._threads), within)


# -- a triggerer ---------------------------------------------------------------------------------


class Triggerer:
    """One triggerer process: its own thread and event loop (so its own watch hub), watched by the
    run's clock (time moves only while the loop has nothing to do)."""

    USER_ACTION = "__airflow_user_action__"

    def __init__(
        self,
        name: str,
        on_event: Callable[[str, int, Any], None],
        clock: SimClock,
        start_delay: float = 0.0,
        on_kill_limit: float = ON_KILL_TIMEOUT,
    ) -> None:
        self.name = name
        self._on_event = on_event
        self._clock = clock
        self._on_kill_limit = on_kill_limit  # simulated seconds
        self._start_delay = start_delay  # simulated seconds a busy loop takes before a new trigger's turn
        self._loop = asyncio.new_event_loop()
        clock.watch_loop(self._loop)
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._started: set[int] = set()
        serving = threading.Event()
        self._thread = threading.Thread(
            target=self._serve, args=(serving,), name=f"triggerer-{name}", daemon=True
        )
        self._thread.start()
        serving.wait(10.0)
        self.alive = True
        self.on_kill_calls = 0

    def _serve(self, serving: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.call_soon(serving.set)
        self._loop.run_forever()

    def _submit(self, fn: Callable[[], Any]) -> None:
        self._loop.call_soon_threadsafe(fn)

    def run(self, trigger_id: int, classpath: str, kwargs: dict[str, Any]) -> None:
        """Start a trigger from its stored kwargs (``TriggerRunner.create_triggers``)."""

        def start() -> None:
            if self._start_delay:
                self._clock.sleep(self._start_delay)  # the loop is busy elsewhere
            self._tasks[trigger_id] = self._loop.create_task(self._run_trigger(trigger_id, classpath, kwargs))

        self._submit(start)

    async def _run_trigger(self, trigger_id: int, classpath: str, kwargs: dict[str, Any]) -> None:
        from airflow_k8s_retry.kube.clock import within

        try:
            trigger = build_trigger(classpath, kwargs)
        except Exception as exc:  # the triggerer fails the deferral of a trigger it cannot build
            self._started.add(trigger_id)
            self._on_event(self.name, trigger_id, TriggerFailed(repr(exc)))
            return
        # As in ``TriggerRunner.run_trigger``: a cancellation that lands before this point (the task
        # had not had its first turn) runs no ``on_kill``.
        self._started.add(trigger_id)
        try:
            async for event in trigger.run():
                self._on_event(self.name, trigger_id, event.payload)
                break
        except asyncio.CancelledError as cancelled:
            if cancelled.args and cancelled.args[0] == self.USER_ACTION:
                self.on_kill_calls += 1
                try:
                    await within(self._clock, trigger.on_kill(), self._on_kill_limit)
                except (TimeoutError, asyncio.CancelledError):
                    pass
                except Exception:
                    pass
            raise
        except Exception as exc:  # the triggerer fails the task's deferral
            self._on_event(self.name, trigger_id, TriggerFailed(repr(exc)))
        finally:
            with contextlib.suppress(Exception):  # the triggerer ignores cleanup errors
                await trigger.cleanup()

    def started(self, trigger_id: int) -> bool:
        """Whether the trigger has had its first turn on this triggerer's loop."""
        return trigger_id in self._started

    def cancel(self, trigger_id: int, *, user_action: bool = True) -> None:
        """The trigger is no longer assigned here (user action, hand-over, DAG run deleted)."""

        self._submit(lambda: self._cancel_now(trigger_id, user_action))

    def stall(
        self, seconds: float, trigger_id: int, thaw_delay: float = 0.0, thaw: threading.Event | None = None
    ) -> None:
        """Freeze this process for ``seconds`` (simulated; a lapsed heartbeat), or until ``thaw`` is
        set; once it thaws it finds the trigger assigned elsewhere and cancels its copy (the
        user-action path: ``on_kill``)."""

        def freeze() -> None:
            self._clock.sleep_until_sync(self._clock.now() + seconds, wake=thaw)
            self._loop.call_later(thaw_delay, self._cancel_now, trigger_id, True)

        self._submit(freeze)

    def _cancel_now(self, trigger_id: int, user_action: bool) -> None:
        task = self._tasks.pop(trigger_id, None)
        if task is not None and not task.done():
            task.cancel(self.USER_ACTION if user_action else None)

    def idle(self, within: float) -> bool:
        """Wait (simulated seconds) until every trigger task here has ended, on_kill included."""
        done = threading.Event()

        async def check() -> None:
            pending = [t for t in self._tasks.values() if not t.done()] + [
                t
                for t in asyncio.all_tasks(self._loop)
                if t is not asyncio.current_task()
                and getattr(t.get_coro(), "__qualname__", "").endswith("_run_trigger")
            ]
            from tests.support.lab import kill_work

            # Work a trigger left running after it ended (on_kill's delete).
            pending += [t for t in kill_work() if not t.done()]
            if pending:
                await asyncio.wait(pending, timeout=within)
            done.set()

        self._loop.call_soon_threadsafe(lambda: self._loop.create_task(check()))
        return self._clock.wait_for(done.is_set, within + 1.0)

    def shutdown(self) -> None:
        """Graceful stop (SIGTERM): triggers are cancelled without the user-action message."""
        if not self.alive:
            return
        self.alive = False
        finished = threading.Event()

        async def stop_all() -> None:
            tasks = [t for t in asyncio.all_tasks(self._loop) if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            finished.set()

        self._loop.call_soon_threadsafe(lambda: self._loop.create_task(stop_all()))
        self._clock.wait_for(finished.is_set, 10.0)
        self._clock.forget_loop(self._loop)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10.0)

    def kill9(self) -> None:
        """``kill -9``: the loop stops where it is; no ``on_kill``, no ``cleanup``."""
        if not self.alive:
            return
        self.alive = False
        self._clock.forget_loop(self._loop)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10.0)

    def close(self) -> None:
        """Release what a dead process would have released (its sockets) once the run is over."""
        if self.alive:
            self.shutdown()
        if self._thread.is_alive():
            return
        try:
            tasks = [t for t in asyncio.all_tasks(self._loop) if not t.done()]
            for task in tasks:
                task.cancel()
            if tasks:
                self._loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            self._loop.run_until_complete(self._loop.shutdown_asyncgens())
        except Exception:
            pass
        self._loop.close()


@dataclass(frozen=True)
class TriggerFailed:
    """A trigger raised: the scheduler resumes the task with ``__fail__`` (a trigger failure)."""

    error: str

    def resumed(self) -> tuple[str, dict[str, Any]]:
        from airflow.sdk.bases.operator import TRIGGER_FAIL_REPR, TriggerFailureReason

        return TRIGGER_FAIL_REPR, {"error": TriggerFailureReason.TRIGGER_FAILURE, "traceback": [self.error]}


def now_as_datetime(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, UTC)
