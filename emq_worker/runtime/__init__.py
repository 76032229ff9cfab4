"""The worker runtime.

The supervisor's beat (reap, promote, drain, park), the lease book and its one-sweep renewal,
settles, the runner that holds each job in its attempts-fenced context, and the daemon around them.
"""
