"""emq-worker: an asyncio worker daemon for EchoMQ queues on Valkey/Redis.

This module is the public API: everything a user writes, enqueues, runs or catches is importable
from here, and `__all__` lists it. `emq_worker.errors` and `emq_worker.retry` are public too (the
same names); the subpackages are internals (see the architecture page in the docs).
"""

from emq_worker.errors import (
    AppImportError,
    ConfigError,
    EmqError,
    FencedError,
    FlowError,
    FlowWriteError,
    JobFailedError,
    JobIdError,
    KindError,
    LockedError,
    PayloadError,
    ProtocolReplyError,
    QueueNameError,
    ResultTimeoutError,
    ResultUnavailableError,
    ScriptError,
    ServerTimeoutError,
    ServerUnreachableError,
    StateError,
    TaskArgumentError,
    UnknownTaskError,
    VersionFenceError,
)
from emq_worker.jobs.context import JobContext
from emq_worker.jobs.events import Event, EventStream, open_events, subscribe
from emq_worker.jobs.flow_tree import Flow, FlowJob
from emq_worker.jobs.handles import (
    AsyncTaskHandle,
    JobHandle,
    SyncJobHandle,
    SyncTaskHandle,
    TaskHandle,
)
from emq_worker.jobs.policy import JobPolicy
from emq_worker.jobs.producer import Enqueued, JobSpec, Producer
from emq_worker.jobs.sync_producer import SyncProducer, sync_producer
from emq_worker.jobs.tasks import App
from emq_worker.retry import Backoff, Exponential, Fixed, Jitter
from emq_worker.runtime.config import WorkerSettings
from emq_worker.runtime.worker import Worker

__all__ = [
    "App",
    "AppImportError",
    "AsyncTaskHandle",
    "Backoff",
    "ConfigError",
    "EmqError",
    "Enqueued",
    "Event",
    "EventStream",
    "Exponential",
    "FencedError",
    "Fixed",
    "Flow",
    "FlowError",
    "FlowJob",
    "FlowWriteError",
    "Jitter",
    "JobContext",
    "JobFailedError",
    "JobHandle",
    "JobIdError",
    "JobPolicy",
    "JobSpec",
    "KindError",
    "LockedError",
    "PayloadError",
    "Producer",
    "ProtocolReplyError",
    "QueueNameError",
    "ResultTimeoutError",
    "ResultUnavailableError",
    "ScriptError",
    "ServerTimeoutError",
    "ServerUnreachableError",
    "StateError",
    "SyncJobHandle",
    "SyncProducer",
    "SyncTaskHandle",
    "TaskArgumentError",
    "TaskHandle",
    "UnknownTaskError",
    "VersionFenceError",
    "Worker",
    "WorkerSettings",
    "open_events",
    "subscribe",
    "sync_producer",
]
