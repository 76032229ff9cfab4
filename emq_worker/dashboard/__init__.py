"""The web dashboard (`emq-worker dashboard`): queues, the lease timeline, jobs, dead letter.

Importing this package imports neither Starlette nor Jinja2: the worker never pays for them, and
`emq-worker dashboard` can say which extra to install when they are missing. `app.create_app`
builds the ASGI application.
"""
