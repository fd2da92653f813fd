"""``known.diagnose`` places what a run shows; what it cannot place stays ``unexplained``."""

from __future__ import annotations

from tests.chaos.harness import Result, Violation
from tests.chaos.known import diagnose

PLAN_130 = "fate=disruption_delete retries=2 on_finish=delete_pod stops_in=5s triggerer=stale@+51s"
WRONG_END = Violation("wrong_end", "fate disruption_delete should end failed, ended success")
LATE = "the simulator ran up to 353 sim s late (a loaded machine)"
MISSED = "the drawn disruption never reached try 2's pod"


def result(*notes: str) -> Result:
    return Result(130, PLAN_130, "success", 2, 2.4, 2360.6, [WRONG_END], notes=list(notes))


def test_a_disruption_that_never_came_in_a_starved_run_is_the_machine() -> None:
    # Seed 130 in a full run: try 2's pod finished before the late harness loop disrupted it.
    assert diagnose(WRONG_END, result(LATE, MISSED)) == "starved_run"


def test_a_wrong_end_is_not_excused_without_both_signs() -> None:
    assert diagnose(WRONG_END, result(MISSED)) == "unexplained"  # not starved: look at it
    assert diagnose(WRONG_END, result(LATE)) == "unexplained"  # every try was disrupted
