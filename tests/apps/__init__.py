"""Apps that worker subprocesses load with `--app tests.apps.<module>:app`."""
