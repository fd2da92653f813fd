"""Side-by-side benchmark of ``PodStateTrigger`` and the cncf ``KubernetesPodTrigger``.

``make bench`` (``python -m bench.run``) drives both triggers the way a triggerer runs them, many
coroutines in one asyncio process, against the same simulator scenarios, and writes
``bench/results/RESULTS.md``, ``results.json`` and PNG plots. See ``docs/benchmark.md``.
"""
