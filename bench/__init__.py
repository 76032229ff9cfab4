"""A side-by-side benchmark of emq-worker against Python peers: `python -m bench`.

This package's `__init__` and `bench.runners.common` import only the standard library: the peer
runners import them from inside the peers' own virtual environments, which lack emq_worker.
"""
