"""What OpenTelemetry tracing costs per job, in-process (no server): the producer's and the
worker's span code paths, timed with and without tracing.

    python -m bench.tracing_cost [--jobs N] [--repeat R]

One job's path is what the Producer and the worker run for it around the wire: the enqueue's
PRODUCER span and its carrier encoded into the JSON envelope (`tracing.send_span`,
`codec.encode`), then the envelope decoded and the attempt's CONSUMER span started, made current
around the handler and ended after the settle (`codec.decode_message`, `tracing.start_attempt`,
`tracing.current`, `tracing.end`). The baseline is the same encode and decode with no tracing
call at all; "per job" is the path's time minus the baseline's, each the best of R runs of N
jobs (the two alternate).

Each mode runs in a process of its own (a tracer provider is set once per process):

- `absent`: opentelemetry-api not importable (the `otel` extra not installed);
- `api, no SDK`: the API installed, no tracer provider set (what a worker gets unless the
  application configures OpenTelemetry);
- `SDK, sampled out`: the SDK's TracerProvider with the ALWAYS_OFF sampler;
- `SDK, recording`: the SDK's TracerProvider, every span sampled and handed to a
  SimpleSpanProcessor whose exporter drops it (the SDK's own cost, no I/O).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

MODES = ("absent", "api", "unsampled", "sdk")
LABELS = {
    "absent": "absent (no otel extra)",
    "api": "api, no SDK configured",
    "unsampled": "SDK, sampled out (ALWAYS_OFF)",
    "sdk": "SDK, recording (exporter drops)",
}
QUEUE = "orders"
TASK = "charge"
JOB_ID = "JOB0000000000001"
KWARGS = {"order_id": "A1", "amount": 1200}


def configure(mode: str) -> None:
    """Set up OpenTelemetry as `mode` says, before emq_worker is imported."""
    if mode == "absent":
        sys.modules["opentelemetry"] = None  # type: ignore[assignment]
        return
    if mode == "api":
        return
    from opentelemetry import trace
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import (
        SimpleSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON

    class Dropped(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider(sampler=ALWAYS_OFF if mode == "unsampled" else ALWAYS_ON)
    provider.add_span_processor(SimpleSpanProcessor(Dropped()))
    trace.set_tracer_provider(provider)


def paths() -> tuple[Callable[[], None], Callable[[], None]]:
    """One job's traced path, and the same without any tracing call."""
    from emq_worker.jobs import codec, tracing

    def traced() -> None:
        with tracing.send_span(QUEUE, 1) as carrier:
            payload = codec.encode(TASK, KWARGS, None, carrier)
        trace = codec.decode_message(payload).trace
        span = tracing.start_attempt(QUEUE, TASK, JOB_ID, 1, trace)
        with tracing.current(span):
            pass  # the handler runs here
        tracing.end(span)

    def untraced() -> None:
        payload = codec.encode(TASK, KWARGS, None, None)
        codec.decode_message(payload)

    return traced, untraced


def per_job_us(path: Callable[[], None], jobs: int) -> float:
    """One run of `jobs` calls, in microseconds of this thread's CPU time per call (the time the
    machine's other processes take the core away is not counted)."""
    started = time.thread_time()
    for _ in range(jobs):
        path()
    return (time.thread_time() - started) / jobs * 1e6


def measure(mode: str, jobs: int, repeat: int) -> dict[str, Any]:
    configure(mode)
    traced, untraced = paths()
    for path in (traced, untraced):  # warm up: imports, caches, the tracer
        per_job_us(path, min(jobs, 2_000))
    from emq_worker.jobs import tracing

    # The two paths alternate, so a busy spell on the machine slows both; the best run of each.
    runs = [(per_job_us(traced, jobs), per_job_us(untraced, jobs)) for _ in range(repeat)]
    with_tracing = min(run[0] for run in runs)
    baseline = min(run[1] for run in runs)
    return {
        "mode": mode,
        "spans": tracing.active(),
        "traced_us": with_tracing,
        "baseline_us": baseline,
        "per_job_us": with_tracing - baseline,
    }


def run_mode(mode: str, jobs: int, repeat: int) -> dict[str, Any]:
    args = ["--mode", mode, "--jobs", str(jobs), "--repeat", str(repeat)]
    done = subprocess.run(
        [sys.executable, "-m", "bench.tracing_cost", *args],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| tracing | tracer called | path, us/job | baseline, us/job | tracing cost, us/job |",
        "| --- | --- | --- | --- | --- |",
    ]
    for r in results:
        lines.append(
            f"| {LABELS[r['mode']]} | {'yes' if r['spans'] else 'no'} | {r['traced_us']:.2f} "
            f"| {r['baseline_us']:.2f} | {r['per_job_us']:.2f} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.tracing_cost", description=__doc__)
    parser.add_argument("--jobs", type=int, default=10_000, help="jobs per run (10 000)")
    parser.add_argument("--repeat", type=int, default=30, help="runs per mode; the best (30)")
    parser.add_argument("--mode", choices=MODES, help=argparse.SUPPRESS)  # one mode, as JSON
    args = parser.parse_args(argv)
    if args.mode:
        print(json.dumps(measure(args.mode, args.jobs, args.repeat)))
        return
    print(f"python {sys.version.split()[0]}, {args.jobs} jobs, best of {args.repeat}")
    print(table([run_mode(mode, args.jobs, args.repeat) for mode in MODES]))


if __name__ == "__main__":
    main()
