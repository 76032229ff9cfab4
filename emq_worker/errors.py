"""The exceptions emq-worker raises. Each message names the offending value."""

from __future__ import annotations

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError


class EmqError(Exception):
    """Base class of every emq-worker error."""


class ConfigError(EmqError, ValueError):
    """A setting, flag or URL is out of range or malformed.

    `setting` names the WorkerSettings field at fault, when there is one, so the command line
    can name the flag and variable that set it; the message then starts with that name.
    """

    def __init__(self, message: str, *, setting: str | None = None) -> None:
        super().__init__(message)
        self.setting = setting


class QueueNameError(ConfigError):
    """A queue name breaks the EchoMQ keyspace grammar."""


class JobIdError(EmqError, ValueError):
    """A job id is not a well-formed branded id."""


class VersionFenceError(EmqError, RedisError):
    """`{emq}:version` holds another protocol version than the one this worker speaks.

    Derives from RedisError (not ConnectionError) so that redis-py's retry policy does not
    retry it: a version mismatch is final.
    """

    def __init__(self, expected: str, found: str | None) -> None:
        self.expected = expected
        self.found = found
        super().__init__(
            f"{{emq}}:version is {found!r} but this worker speaks {expected!r}; "
            "refusing to touch the keyspace (set --wire-version to match, or migrate)"
        )


class ServerUnreachableError(EmqError, RedisConnectionError):
    """The server could not be reached, or did not answer as Redis (an HTTP server on the port);
    the message names it (its URL, never the password) and says what was seen. A redis-py
    ConnectionError too, so code that catches those catches it."""


class ServerTimeoutError(ServerUnreachableError, RedisTimeoutError):
    """The server accepted the connection but did not answer within the socket timeout (a
    frozen server, another service on the port); a redis-py TimeoutError too."""


class ScriptError(EmqError):
    """A Lua script failed to load or replied with a shape the worker does not understand."""


class ProtocolReplyError(EmqError):
    """A script refused with a typed EchoMQ error class (EMQKIND, EMQLOCK, EMQSTATE, ...)."""

    def __init__(self, error_class: str, detail: str) -> None:
        self.error_class = error_class
        self.detail = detail
        super().__init__(f"{error_class} {detail}")


class KindError(ProtocolReplyError):
    """EMQKIND: the job id is not JOB-namespaced."""


class LockedError(ProtocolReplyError):
    """EMQLOCK: the job is held by a worker and cannot be removed."""


class StateError(ProtocolReplyError):
    """EMQSTATE: the job is not in the state the verb needs."""


class UnknownTaskError(EmqError, LookupError):
    """A payload names a task that the app does not register."""


class PayloadError(EmqError, ValueError):
    """A payload could not be decoded into a task call."""


class AppImportError(ConfigError):
    """`--app module:attr` does not point at an App."""


class FencedError(EmqError):
    """A running job's write (progress, a log line) was refused: this holder no longer owns the
    job (its lease was lost to the reaper or another claim, or the job is gone)."""

    def __init__(self, job_id: str, status: str, detail: str) -> None:
        self.job_id = job_id
        self.status = status
        self.detail = detail
        super().__init__(f"job {job_id}: write refused ({status} {detail!r}); the lease is lost")


class ResultTimeoutError(EmqError, TimeoutError):
    """`Producer.result`: the job has not completed within the timeout (it may still)."""


class JobFailedError(EmqError):
    """`Producer.result`: the job is dead; `last_error` says why."""

    def __init__(self, job_id: str, last_error: str) -> None:
        self.job_id = job_id
        self.last_error = last_error
        super().__init__(f"job {job_id} is dead: {last_error}")


class ResultUnavailableError(EmqError, LookupError):
    """`Producer.result`: no result is stored and none will come (the job completed without
    storing one, its result expired, it was removed, it never existed, or its handler returned
    a value JSON cannot hold)."""


class TaskArgumentError(ConfigError, TypeError):
    """A typed task handle's arguments do not fit its handler's signature (a missing, unknown or
    positional-only argument); raised before anything is written."""


class FlowError(ConfigError):
    """A flow (a parent and its children) cannot be written as given: a tree deeper than
    EchoMQ's cap, an id used twice, a node without a task or payload. Raised before anything
    is written."""


class FlowWriteError(EmqError):
    """A flow was refused (a job with one of its ids exists) or, across queues, written only in
    part: the parts in `written` landed, and their parents stay `awaiting_children`, never
    released (fail-closed); the message says which jobs and what to remove."""

    def __init__(self, message: str, written: tuple[tuple[str, tuple[str, ...]], ...]) -> None:
        self.written = written
        """(queue, job ids) of each part written, in the order written."""
        super().__init__(message)
