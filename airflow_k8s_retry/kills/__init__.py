"""Every way a killed or orphaned try's pod gets deleted, in one place.

A try's pod is deleted by the worker that acts on its verdict. When no worker acts on a verdict,
something else must, and which one depends on where the try was when it ended. Each row names the
mechanism that deletes the pod in that situation; ``docs/kills.md`` has the same table with the
test that proves each row.

===========================================================  =========================================
situation                                                    who deletes the pod
===========================================================  =========================================
killed before the operator holds its pod (sweep, create)     the worker's ``on_kill``, by label
                                                             (:mod:`.sweep`); ``_launch`` deletes
                                                             the pod a create returns after the kill
killed while the worker holds the pod                        the worker's ``on_kill``, by UID
killed while deferred, on Airflow 3.3                        the trigger's ``on_kill``
                                                             (:mod:`.trigger`), once the task
                                                             instance's state confirms the kill
killed while deferred with no triggerer running the          the api-server's listener
trigger, or on Airflow 3.1 and 3.2                           (:mod:`.listener`), from the trigger row
marked failed, successful or skipped after the trigger       the api-server's listener, from the
fired, before a worker resumed the try                       event in ``next_kwargs``
cleared after the trigger fired, before a worker            the sweep of the try the clear starts
resumed the try                                              (:mod:`.sweep`)
killed while running, the kill missing ``on_kill``           the api-server's listener, by label
the deferral timed out, or its trigger failed                ``resume_execution``, by label
                                                             (:mod:`.sweep`)
the worker died, retries left; a delete failed               the next try's sweep (:mod:`.sweep`)
the worker died on the last try, or its delete failed        the failure callback (:mod:`.callback`)
after the last try's verdict
===========================================================  =========================================

A DAG deleted after its trigger fired, before a worker resumed the try, calls nothing here:
``airflow kubernetes cleanup-pods`` deletes such a pod once it has finished, or once it has been
pending for ``--min-pending-minutes``.

The kill policy (which task instance states mean a kill, which pods a kill leaves alone) is
:mod:`.policy`, one for all of them.
"""
