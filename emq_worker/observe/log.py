"""structlog configuration; called once, by the CLI. Libraries only ever get a logger."""

from __future__ import annotations

import logging
import sys
from typing import Literal

import structlog

LogFormat = Literal["auto", "json", "console"]


def traceback_as_block(
    logger: object, method: str, event: structlog.typing.EventDict
) -> structlog.typing.EventDict:
    """On a console, a failed job's `traceback` prints as a block under its line (as an
    exception does), not as one escaped string; JSON lines keep it as the `traceback` field."""
    trace = event.get("traceback")
    if isinstance(trace, str) and "exception" not in event:
        event["exception"] = event.pop("traceback")
    return event


def configure(fmt: LogFormat = "auto", level: str = "info") -> None:
    use_json = fmt == "json" or (fmt == "auto" and not sys.stderr.isatty())
    renderers: list[structlog.typing.Processor] = (
        [structlog.processors.JSONRenderer()]
        if use_json
        else [traceback_as_block, structlog.dev.ConsoleRenderer()]
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            *renderers,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]
        ),
        # One write per line (message and newline together): processes sharing an output
        # (`run --processes N`, a journal pipe, a container log) never glue two lines into one.
        # print() would write the newline apart.
        logger_factory=structlog.WriteLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )


def get_logger(**bound: object) -> structlog.typing.FilteringBoundLogger:
    logger: structlog.typing.FilteringBoundLogger = structlog.get_logger("emq_worker")
    return logger.bind(**bound) if bound else logger
