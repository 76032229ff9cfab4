"""emq-worker: an asyncio worker daemon for EchoMQ queues on Valkey/Redis."""

from emq_worker.config import WorkerSettings
from emq_worker.context import JobContext
from emq_worker.producer import Enqueued, JobSpec, Producer, sync_producer
from emq_worker.tasks import App
from emq_worker.worker import Worker

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
