"""A worker given logical queue names: it serves every partition of each partitioned one.

At start each name given is looked up in the partition registry (protocol/partitions.py): a plain
queue is served as it is; a partitioned one by its current partitions, the partitions of every
generation not yet retired, and the logical name itself. While it runs, the registry is read again
every WATCH_S while a name it was given is partitioned (one SMISMEMBER, plus one HGETALL per
partitioned queue), every PLAIN_WATCH_S while none is (one SMISMEMBER: an idle worker's cost);
when what is to be served has changed (N was set, a generation retired), the inner Worker is
stopped gracefully (running jobs finish within the grace period, the rest are handed back) and a
new one serves the new set. The
same look retires each superseded generation once it is drained (any worker may; it is one HDEL).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import anyio
from redis.asyncio import Redis
from redis.exceptions import NoPermissionError

from emq_worker.jobs.tasks import App
from emq_worker.observe.log import get_logger
from emq_worker.observe.sdnotify import Notifier
from emq_worker.protocol.partitions import RETIRE_AFTER_MS, read_plans, retire_drained
from emq_worker.runtime.config import WorkerSettings
from emq_worker.runtime.worker import Worker, worker_client
from emq_worker.valkey.failures import RETRYABLE, describe, fatal

WATCH_S = 2.0
PLAIN_WATCH_S = 60.0
"""While no queue it serves is partitioned, a worker looks this seldom: a queue partitioned for
the first time is served by its partitions within this long (its producers switch within a
second; the jobs they send meanwhile wait in the partitions). It was 10 s: in an idle fleet that
one SMISMEMBER per worker was a seventh of all it asked, for an operator's one-off change."""


@dataclass(frozen=True, slots=True)
class RegistryWatch:
    """How the worker follows the registry."""

    every_s: float = WATCH_S
    """How often it reads the registry again while a queue it serves is partitioned."""
    plain_every_s: float = PLAIN_WATCH_S
    """How often while none is."""
    retire_after_ms: int = RETIRE_AFTER_MS
    """How long after a change of N a drained generation may be retired."""


class PartitionedWorker:
    """Runs Workers over the partitions of the queues named in `settings.queues`, one after
    another as the registry changes; the same stop verbs as a Worker."""

    def __init__(
        self,
        settings: WorkerSettings,
        app: App,
        watch: RegistryWatch = RegistryWatch(),
        *,
        client: Redis | None = None,
        notifier: Notifier | None = None,
    ) -> None:
        self.settings = settings
        self.app = app
        self.ready = anyio.Event()
        """Set once the first inner Worker is ready."""
        self.worker: Worker | None = None
        """The Worker serving now."""
        self.served: tuple[str, ...] = ()
        self.restarts = 0
        self._client = client
        self._notifier = notifier
        self._every = watch
        self._stop = False
        self._refused = False
        self.log = get_logger()

    def request_stop(self) -> None:
        """Graceful, as Worker.request_stop; no other Worker is started after this one."""
        self._stop = True
        for worker in filter(None, [self.worker]):
            worker.request_stop()

    def force_stop(self) -> None:
        """At once, as Worker.force_stop."""
        self._stop = True
        for worker in filter(None, [self.worker]):
            worker.force_stop()

    async def run(self) -> None:
        async with worker_client(self.settings, self._client) as client:
            self.served = await self._resolve(client, retry=False)
            # Again only when the watch stopped it to re-form (a burst run ends on its own).
            while not self._stop and await self._serve_once(client):
                pass

    async def _serve_once(self, client: Redis) -> bool:
        """Serve `self.served` until stopped; whether the watch stopped it to re-form."""
        settings = dataclasses.replace(self.settings, queues=self.served)
        worker = Worker(settings, self.app, client=self._client, notifier=self._notifier)
        self.worker = worker
        served = self.served
        async with anyio.create_task_group() as group:
            group.start_soon(self._watch, client, worker)
            await worker.run()
            group.cancel_scope.cancel()
        return self.served != served

    async def _watch(self, client: Redis, worker: Worker) -> None:
        await worker.ready.wait()
        self.ready.set()
        while True:
            partitioned = self.served != tuple(self.settings.queues)
            await anyio.sleep(self._every.every_s if partitioned else self._every.plain_every_s)
            served = await self._resolve(client, retry=True)
            if served != self.served:
                self.log.info("partitions_changed", was=list(self.served), serving=list(served))
                self.served = served
                self.restarts += 1
                worker.stop.request()  # graceful, but not a stop to tell systemd about
                return

    async def _resolve(self, client: Redis, *, retry: bool) -> tuple[str, ...]:
        """What to serve for the names given; on a failed read, what is served now (`retry`)."""
        names: Sequence[str] = self.settings.queues
        if self._refused:
            return tuple(names)
        try:
            plans = await read_plans(client, names)
            for plan in plans.values():
                retired = await retire_drained(client, plan, self._every.retire_after_ms)
                if retired:
                    self.log.info("partitions_retired", queue=plan.queue, generations=retired)
                    plans = await read_plans(client, names)
        except NoPermissionError:
            self._refused = True  # an ACL without the {emq} keys: the names are plain queues
            self.log.warning("partitions_not_readable", queues=list(names))
            return tuple(names)
        except RETRYABLE as exc:
            if fatal(exc) or not retry:
                raise
            self.log.warning("partitions_read_failed", error=describe(exc))
            return self.served
        served: list[str] = []
        for name in names:
            found = plans.get(name)
            served += found.served() if found is not None else [name]
        return tuple(dict.fromkeys(served))
