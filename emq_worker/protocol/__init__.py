"""The EchoMQ wire as emq-worker speaks it.

Key names and branded ids, the server clock, payload limits, the script loader with its Lua files
(`lua/`, one per verb, each with a contract header), typed replies, and the `Queue` verbs. Nothing
here runs a worker: it is what a worker, a producer and an operator share.
"""
