"""`python -m emq_worker.cli`: the `emq-worker` command (how `run --processes` starts its
children, whatever the console script is called)."""

from emq_worker.cli.main import main

main(prog_name="emq-worker")
