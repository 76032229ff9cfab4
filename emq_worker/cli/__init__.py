"""Every click command of `emq-worker`; nothing outside this package imports click."""
