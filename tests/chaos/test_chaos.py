"""The short chaos run inside ``make test`` (the full one is ``make chaos``, 1,000 runs).

A plain stretch of seeds, plus the seeds that showed each defect the suite has found, on the code
before its fix (each is named with the defect). Every invariant is checked on every run, and no
run may break one. The one thing tolerated is a run the machine starved: the simulator's own
timers fired hundreds of simulated seconds late (``known.diagnose`` says ``starved_run``), which
says nothing about the package.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from tests.chaos.harness import Environment, Result, _deleted_under_the_worker, run_seed
from tests.chaos.known import diagnose

#: defect -> seeds that showed it before its fix (replayed on the fixed code: no violation).
FIXED: dict[str, list[int]] = {
    "#6/#1 last try: a dead worker's pod (now the failure callback's)": [41, 59, 43, 52],
    "#1 a stamped pod whose delete failed (403/410 included)": [13, 26],
    "#1 on_kill's read or delete failed once": [16, 42],
    "#1 a kept pod still running after execution_timeout beside the next try": [163, 193],
    "#4 a deleted DAG run's pod": [97],
    "#7 a quota 403 at create ended the task": [75, 171],
    "#5 a stale triggerer deleted the pod under the worker": [265, 508],
    "a preempted pod first seen gone was judged deleted externally": [9, 11, 144],
    "an unexpected answer at create (410) ended the task": [251],
    "an earlier try's orphan still stopping when the next try's pod ran": [247, 565],
    "a relaunch's old pod whose delete failed, after the try succeeded": [733],
    "the worker's backoff slept on the wall clock (a false hang)": [195],
    "the next try started beside an earlier pod still stopping, or after the sweep's LIST failed": [506, 713],
    "a task killed in the moment its trigger fired (the event dropped, no on_kill)": [736],
    "the worker's client waited out a 429's Retry-After on the wall clock (1 s = 1,000 sim s)": [344],
    "a kill during a relaunch's create in a resumed worker, SIGKILLed before the code went on": [9],
    "a kill the worker heard of after its deferral was refused (no on_kill)": [7, 298, 320, 749],
    "a preempted pod judged deleted while a momentary 403 had cost the Events feed": [456],
}
#: A plain stretch of seeds on top (kills of a running task, and kills while it waits for a worker,
#: among them), and runs whose worker meets its execution_timeout alarm on try 1, before any other
#: event can end the try: before the create, before an XCom push, after one landed.
BATCH = [*range(0, 30), 443, 445, 763]


@pytest.fixture(scope="module")
def results() -> Iterator[dict[int, Result]]:
    env = Environment()
    try:
        seeds = sorted(set(BATCH) | {s for seeds in FIXED.values() for s in seeds})
        yield {seed: run_seed(env, seed) for seed in seeds}
    finally:
        env.close()


def broken(result: Result) -> bool:
    return any(diagnose(v, result) != "starved_run" for v in result.violations)


def test_no_run_breaks_an_invariant(results: dict[int, Result]) -> None:
    failing = [r.explain() for r in results.values() if broken(r)]
    assert not failing, "invariants broken:\n" + "\n\n".join(failing)


@pytest.mark.parametrize("defect", list(FIXED))
def test_a_fixed_defect_stays_fixed(defect: str, results: dict[int, Result]) -> None:
    showing = [results[s].explain() for s in FIXED[defect] if broken(results[s])]
    assert not showing, f"{defect}:\n" + "\n\n".join(showing)


def test_the_runs_did_what_they_drew(results: dict[int, Result]) -> None:
    # The harness itself: tasks ended, faults were hit, pods were judged.
    assert all(r.state in ("success", "failed", "skipped") for r in results.values())
    assert sum(sum(r.faults_hit.values()) for r in results.values()) > 0
    assert sum(len(r.verdicts) for r in results.values()) >= len(results) // 2
    # The model's Airflow: a kill of a running task whose code goes on after on_kill, a kill while
    # the task waits for a worker, and the worker's execution_timeout alarm all happened.
    notes = [" ".join(r.notes) for r in results.values()]
    assert any("killed by the user" in n for n in notes)
    assert any("the deferral was refused" in n for n in notes)
    assert any("while it waited for a worker" in n for n in notes)
    assert sum("AirflowTaskTimeout: execution_timeout ran out" in n for n in notes) >= 3


def run_with_a_busy_triggerer(seed: int) -> Result:
    """Run ``seed`` with every triggerer's loop busy for 300 simulated seconds (0.3 real seconds at
    the pace the runs were tuned at) before a new trigger's first turn."""
    env = Environment(triggerer_start_delay=0.3)
    try:
        return run_seed(env, seed)
    finally:
        env.close()


def test_a_busy_triggerer_does_not_move_the_users_kill_before_the_trigger_starts() -> None:
    # Seed 16 marks the task failed 115 simulated seconds after it deferred: 0.115 real seconds.
    # A triggerer loop busy for 0.3 s (a loaded machine) used to receive that cancellation before
    # the trigger's first turn, so no on_kill ran and the pod was left (Airflow does the same; see
    # docs/reliability.md). The user acts that long after the trigger runs, as on a real triggerer.
    result = run_with_a_busy_triggerer(16)
    assert "user=mark_failed" in result.plan
    assert any("user mark_failed while deferred" in n for n in result.notes)
    assert not broken(result), result.explain()


def test_a_kill_inside_a_hand_over_still_deletes_the_pod() -> None:
    # Seed 107: triggerer A is killed -9 at +17 s and the user marks the task failed at +18 s. With
    # triggerer B busy for 0.3 s (300 simulated seconds), the kill lands before B's first turn, so
    # Airflow runs no on_kill anywhere; the api-server's listener deletes the pod instead.
    result = run_with_a_busy_triggerer(107)
    assert "triggerer=kill9@+17s user=mark_failed@+18s" in result.plan
    assert any("the kill came before its first turn on triggerer B" in n for n in result.notes), result.notes
    assert not broken(result), result.explain()


def test_a_trigger_that_never_gives_a_verdict_is_a_hang(
    results: dict[int, Result], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A trigger idle on its loop, waiting for nothing that will come, reaches the bound: the clock
    # jumps to it once nothing else is due. (``results`` first: the module's runs are done.)
    from airflow_k8s_retry.triggers import PodStateTrigger

    async def waits_forever(self: PodStateTrigger) -> Any:
        await asyncio.Event().wait()
        yield  # an async generator, as run() is

    monkeypatch.setattr(PodStateTrigger, "run", waits_forever)
    env = Environment()
    try:
        result = run_seed(env, 1)  # a missing image, retries=3, a triggerer killed at +114 s
    finally:
        env.close()
    assert [v.kind for v in result.violations] == ["hang"], result.explain()
    assert "trigger 1: no verdict within the task's bound" in result.notes, result.notes


def test_a_delete_after_the_users_kill_of_the_try_is_not_one_under_the_worker() -> None:
    # Seed 14 on a loaded machine: the verdict fired, the worker acted on it, the user killed the
    # try, and the kill's listener deleted the pod before the harness noted the try's end.
    pod = {"metadata": {"uid": "u1", "name": "p-t4"}}
    run = SimpleNamespace(
        verdicts=[(4, "u1", "retry", "container.oom")],
        verdict_at={"u1": 10.0},
        try_ended={4: 20.0},
        worker_done_at={4: 12.0},
    )

    def audit(delete_at: float) -> list[dict[str, Any]]:
        return [
            {"kind": "request", "verb": "create", "resource": "pods", "user_agent": "worker", "t": 1.0},
            {
                "kind": "request", "verb": "delete", "resource": "pods", "status": 200,
                "user_agent": "listener", "name": "p-t4", "t": delete_at,
            },
        ]  # fmt: skip

    assert _deleted_under_the_worker(run, audit(13.0), [pod]) == []  # type: ignore[arg-type]
    [found] = _deleted_under_the_worker(run, audit(11.0), [pod])  # type: ignore[arg-type]
    assert found.kind == "deleted_under_the_worker"  # before the kill: the worker was acting on it


def test_a_trigger_deferred_after_the_tasks_bound_still_gets_its_own_time_to_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Seed 2 in a fresh-clone make test: try 1 took 4,800 sim s (past the task's 3,600 sim s bound),
    # so try 2's trigger, not started on the harness's first turn after the deferral, was called a
    # hang at once. A trigger gets its own time to start, as it gets its own time to answer once it
    # has. Here the worker's parse of try 2 takes 4,000 simulated seconds, and each triggerer's loop
    # is busy 50 simulated seconds before a new trigger's first turn.
    from tests.chaos.harness import ChaosRun

    parse = ChaosRun.make_operator

    def slow_parse_on_try_2(self: ChaosRun) -> Any:
        if self.tries_run == 1 and not getattr(self, "_parsed_slowly", False):
            self._parsed_slowly = True  # type: ignore[attr-defined]
            self.clock.sleep(4_000.0)
        return parse(self)

    monkeypatch.setattr(ChaosRun, "make_operator", slow_parse_on_try_2)
    env = Environment(triggerer_start_delay=0.05)
    try:
        result = run_seed(env, 2)
    finally:
        env.close()
    assert result.tries == 2 and result.sim_seconds > 4_000, result.explain()
    assert [v.kind for v in result.violations] == [], result.explain()
    assert len(result.verdicts) == 2, result.explain()


def test_a_seed_gives_one_answer() -> None:
    # Seed 413 once failed on a loaded machine and passed on its replay: the simulated clock followed
    # the wall clock. On the discrete clock two runs of a seed agree on everything but pod UIDs.
    def once() -> tuple[Any, ...]:
        env = Environment()
        try:
            result = run_seed(env, 12)  # a disruption, a relaunch, two faults
        finally:
            env.close()
        verdicts = [v.split(": ", 1)[1] for v in result.verdicts]
        return result.state, verdicts, [v.kind for v in result.violations], round(result.sim_seconds, 1)

    assert once() == once()


def test_the_clock_moves_only_once_every_loop_is_idle() -> None:
    from tests.chaos.scheduler import SimClock

    clock = SimClock(1_000.0)
    loop = asyncio.new_event_loop()
    clock.watch_loop(loop)
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    woke: list[tuple[str, float]] = []

    async def sleeper(name: str, seconds: float) -> None:
        await clock.sleep_until(clock.now() + seconds)
        woke.append((name, clock.now()))

    async def busy_then_sleep() -> None:
        await asyncio.sleep(0.1)  # real work of a tenth of a second: no simulated time passes
        woke.append(("busy", clock.now()))
        await sleeper("after-busy", 5.0)

    try:
        for name, seconds in (("b", 60.0), ("a", 30.0)):
            asyncio.run_coroutine_threadsafe(sleeper(name, seconds), loop)
        asyncio.run_coroutine_threadsafe(busy_then_sleep(), loop)
        clock.sleep(100.0)  # the driver's wait moves the clock, one sleeper at a time
        assert woke == [("busy", 1_000.0), ("after-busy", 1_005.0), ("a", 1_030.0), ("b", 1_060.0)]
        assert clock.now() == 1_100.0
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5.0)
        loop.close()
