"""Every way a killed or orphaned try's pod gets deleted, in one place.

A try's pod is deleted by the worker that acts on its verdict (``RetryingPodOperator._finish``).
When that worker never comes, something else must, and which one depends on where the try was when
it ended. Each row names the mechanism that deletes the pod in that situation and the test that
proves it; ``docs/kills.md`` has the same table with the evidence for each row.

================================================  ================================================
situation                                         who deletes the pod
================================================  ================================================
killed while the create is on its way             the worker's ``on_kill`` (by label) and
                                                  ``_launch`` (the pod the create returns)
killed while the pod runs (``deferrable=False``)  the worker's ``on_kill`` (by UID)
killed while deferred (Airflow 3.3)               the trigger's ``on_kill`` (:mod:`.trigger`), once
                                                  the task instance's state confirms the kill
killed while deferred with no triggerer running   the api-server's listener (:mod:`.listener`),
it, or on Airflow 3.1/3.2                         from the trigger row
killed after the trigger fired, before a worker   the api-server's listener, from the event in
resumed the try (``scheduled``/``queued``)        ``next_kwargs``; the trigger's after-firing check
killed while running, the kill missing            the api-server's listener, by the try's labels
``on_kill`` (a deferral refused meanwhile)
the deferral timed out or its trigger failed      ``resume_execution`` (:mod:`.sweep`, by label)
the worker died, retries left                     the next try's sweep (:mod:`.sweep`)
the worker died on the last try                   the failure callback (:mod:`.callback`)
a delete that failed after the verdict            the next try's sweep; on the last try, the
                                                  failure callback
================================================  ================================================

The kill policy (which task instance states mean a kill, which pods a kill leaves) is
:mod:`.policy`.
"""
