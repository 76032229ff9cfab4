"""The operator's verbs, without click.

Discovery, stats, inspect, pause and resume, remove, cancel, the dead letter, and their text
rendering: the CLI and the dashboard both call these.
"""
