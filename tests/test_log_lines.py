"""Log lines stay whole when processes share one output: `run --processes N` children, the
parent, systemd's journal pipe and a container's log all take several processes' lines on one
file or pipe. Each line goes out in one write, so two processes logging at once cannot glue
their lines into one that no JSON reader parses."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import structlog

from emq_worker.observe import log

WRITERS = 4
LINES_EACH = 3_000
BURST = """
import sys
from emq_worker.observe import log
log.configure("json")
logger = log.get_logger()
for n in range(int(sys.argv[2])):
    logger.info("tick", writer=int(sys.argv[1]), n=n, pad="x" * 200)
"""


class RecordingStream:
    """A text stream that keeps each write call apart."""

    def __init__(self) -> None:
        self.writes: list[str] = []

    def write(self, text: str) -> int:
        self.writes.append(text)
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


@pytest.mark.parametrize("fmt", ["json", "console"])
def test_each_log_line_is_written_in_one_call_ending_with_its_newline(
    fmt: log.LogFormat, monkeypatch: pytest.MonkeyPatch
) -> None:
    stream = RecordingStream()
    monkeypatch.setattr(sys, "stderr", stream)
    try:
        log.configure(fmt, "info")
        log.get_logger().info("worker_stopped", forced=False)
        log.get_logger().warning("job_dead", error="ValueError: x", traceback="Traceback\n  x\n")
    finally:
        structlog.reset_defaults()
    assert len(stream.writes) == 2, stream.writes
    for text in stream.writes:
        assert text.endswith("\n")
    assert "worker_stopped" in stream.writes[0]
    assert "job_dead" in stream.writes[1]


def test_processes_logging_to_one_file_at_once_leave_every_json_line_whole(
    tmp_path: Path,
) -> None:
    output = tmp_path / "shared.log"
    with output.open("ab") as shared:
        writers = [
            subprocess.Popen(
                [sys.executable, "-c", BURST, str(w), str(LINES_EACH)],
                stdout=shared,
                stderr=shared,
            )
            for w in range(WRITERS)
        ]
        codes = [writer.wait(timeout=60) for writer in writers]
    assert codes == [0] * WRITERS
    seen: dict[int, int] = dict.fromkeys(range(WRITERS), 0)
    torn = []
    for line in output.read_text().splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            torn.append(line[:120])
            continue
        seen[event["writer"]] += 1
    assert torn == []
    assert seen == dict.fromkeys(range(WRITERS), LINES_EACH)
