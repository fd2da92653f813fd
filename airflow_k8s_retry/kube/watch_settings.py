"""The watch hub's timings and scope, in one frozen object handed to the hub.

Airflow builds triggers itself, from their serialized kwargs, so a trigger cannot hand settings to
the hub it shares with every other trigger of its event loop. The hub of a loop therefore takes the
*process's* settings when it is first made: :meth:`HubSettings.from_env` unless a caller chose
others with :func:`use_settings` (tests, the benchmark, the chaos harness, which runs triggers on a
faster clock). A hub made directly (``WatchHub(HubSettings(...))``) takes the ones it is given.

Example::

    fast = HubSettings(backoff_base=0.05, backoff_cap=0.2, watch_timeout=(1, 1))
    with use_settings(fast):
        ...  # every hub made meanwhile reconnects within 0.2 s and re-opens its watches each second
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from airflow_k8s_retry.kube.clock import Clock

#: Environment variable: ``namespace`` keeps every feed to one namespace (no cluster-wide watch).
WATCH_SCOPE_ENV = "AIRFLOW_K8S_RETRY_WATCH_SCOPE"


class WatchScope(StrEnum):
    """How far one feed reaches."""

    #: One feed over all namespaces where RBAC allows (else one per namespace).
    CLUSTER = "cluster"
    #: Always one feed per namespace.
    NAMESPACE = "namespace"


@dataclass(frozen=True)
class HubSettings:
    """How the watch hub paces itself. Every field is in seconds unless it says otherwise."""

    #: First reconnect delay after a failed request; it doubles per failure up to ``backoff_cap``
    #: (each delay drawn with jitter from its upper half, so many feeds do not reconnect in step).
    backoff_base: float = 0.5
    #: Longest reconnect delay (below ``backoff_base``, every delay is drawn from its upper half).
    backoff_cap: float = 30.0
    #: Reconnect delay while the API server refuses or drops connections (no HTTP answer at all: it
    #: is down or restarting), at most ``backoff_cap``. Fixed, not growing, so the watch resumes
    #: within about this long after the server is back; answers such as 429 or 5xx back off.
    reconnect_interval: float = 1.0
    #: How long a subscribed pod may be missing from the feed before it is read once with a GET (the
    #: watch may just be behind a pod created a moment ago; it must not be taken for a deleted one).
    confirm_delay: float = 2.0
    #: Server-side watch timeout range (a random whole number of seconds in it per watch request, so
    #: watches of many namespaces do not reconnect in lockstep). The apiserver's own limit (its
    #: ``--min-request-timeout``, 1800 s by default, randomised up to twice that) is the same range;
    #: bookmarks keep a watch alive meanwhile, and a watch silent for longer than
    #: ``kube.aio.WATCH_IDLE_LIMIT`` is re-opened at once.
    watch_timeout: tuple[int, int] = (1800, 3600)
    #: Cluster-wide feeds where RBAC allows, or always per namespace (``AIRFLOW_K8S_RETRY_WATCH_SCOPE``).
    scope: WatchScope = WatchScope.CLUSTER
    #: How long a feed that a ``403`` moved to polling polls before it tries its LIST+WATCH again:
    #: an authorizer that denied for a moment (a webhook's timeout) must not cost the watch, or the
    #: Events, for the rest of the triggerer's life. A lasting denial costs one refused request here.
    rbac_recheck: float = 300.0
    #: What the feeds' waits (reconnect backoff, polling, the confirming GET's delay, the RBAC
    #: recheck) run on: None, the event loop's own timers, in production; a test hands in a
    #: :class:`~airflow_k8s_retry.kube.clock.ManualClock` to let each wait end only when it
    #: advances that clock, and so count exactly what a feed does per step.
    clock: Clock | None = None

    def __post_init__(self) -> None:
        if not (self.backoff_base > 0 and self.backoff_cap > 0):
            raise ValueError(
                f"HubSettings: backoff_base and backoff_cap must be > 0 seconds, got "
                f"{self.backoff_base!r} and {self.backoff_cap!r}"
            )
        if not self.reconnect_interval > 0:
            raise ValueError(
                f"HubSettings.reconnect_interval must be > 0 seconds, got {self.reconnect_interval!r}"
            )
        if not self.rbac_recheck > 0:
            raise ValueError(f"HubSettings.rbac_recheck must be > 0 seconds, got {self.rbac_recheck!r}")
        if self.confirm_delay < 0:
            raise ValueError(f"HubSettings.confirm_delay must be >= 0 seconds, got {self.confirm_delay!r}")
        low, high = self.watch_timeout
        if not 0 < low <= high:
            raise ValueError(
                f"HubSettings.watch_timeout must be (low, high) whole seconds with 0 < low <= high, "
                f"got {self.watch_timeout!r}"
            )
        object.__setattr__(self, "scope", WatchScope(self.scope))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> HubSettings:
        """The defaults, with the scope from ``AIRFLOW_K8S_RETRY_WATCH_SCOPE`` when it is set."""
        value = (os.environ if environ is None else environ).get(WATCH_SCOPE_ENV)
        if not value:
            return cls()
        try:
            return cls(scope=WatchScope(value))
        except ValueError:
            raise ValueError(f"{WATCH_SCOPE_ENV}={value!r}: use 'cluster' or 'namespace'") from None


# The settings chosen by the open use_settings() blocks, innermost last. Event loops of several
# threads may make hubs at once, hence the lock.
_chosen: list[HubSettings] = []
_chosen_lock = threading.Lock()


def settings_for_new_hubs() -> HubSettings:
    """What a hub made now takes: the settings of the innermost :func:`use_settings`, else the
    environment's."""
    with _chosen_lock:
        chosen = _chosen[-1] if _chosen else None
    return chosen if chosen is not None else HubSettings.from_env()


@contextlib.contextmanager
def use_settings(settings: HubSettings) -> Iterator[HubSettings]:
    """Make every hub made inside the block take ``settings`` (hubs made earlier keep theirs)."""
    with _chosen_lock:
        _chosen.append(settings)
    try:
        yield settings
    finally:
        with _chosen_lock:
            _chosen.remove(settings)
