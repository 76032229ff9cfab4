"""Reaching Valkey/Redis: connections, cluster routing, credentials, and sorting server errors."""
