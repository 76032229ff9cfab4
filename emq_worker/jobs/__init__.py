"""What users write and send.

The `App` and its tasks, the job context a handler receives, the producer, payload encoding,
results, repeatable jobs, progress and log writes, and the lifecycle events clients read.
"""
