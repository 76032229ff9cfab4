"""The chaos suite: real worker processes and a real redis-server under faults, judged by a loss
checker (checker.py) over the handlers' ledgers (ledger.py) and the final Redis state."""
