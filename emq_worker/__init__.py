"""emq-worker: an asyncio worker daemon for EchoMQ queues on Valkey/Redis."""

from emq_worker.beat.config import WorkerSettings
from emq_worker.beat.worker import Worker
from emq_worker.jobs.context import JobContext
from emq_worker.jobs.producer import Enqueued, JobSpec, Producer, sync_producer
from emq_worker.jobs.tasks import App

__all__ = [
    "App",
    "Enqueued",
    "JobContext",
    "JobSpec",
    "Producer",
    "Worker",
    "WorkerSettings",
    "sync_producer",
]
