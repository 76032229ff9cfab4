"""Where a Redis password comes from when the URL carries none, so it never has to sit in argv.

In order, the first that exists wins:
1. the file named by `EMQ_REDIS_PASSWORD_FILE` (an explicit choice: missing or empty is an error);
2. the systemd credential `$CREDENTIALS_DIRECTORY/redis-password` (`LoadCredential=`);
3. the Docker/Compose secret `/run/secrets/redis-password`.

The password is put into the URL (percent-encoded), which every message prints redacted.
A URL that already has a password is left alone: one source, never a silent override.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from urllib.parse import quote

from emq_worker.errors import ConfigError
from emq_worker.valkey.urls import split_url

PASSWORD_FILE_ENV = "EMQ_REDIS_PASSWORD_FILE"
CREDENTIAL_NAME = "redis-password"
RUN_SECRETS = Path("/run/secrets")


def password_source(environ: Mapping[str, str], run_secrets: Path = RUN_SECRETS) -> Path | None:
    """The file the password is read from, or None when no source is configured."""
    explicit = environ.get(PASSWORD_FILE_ENV)
    if explicit:
        return Path(explicit)
    directory = environ.get("CREDENTIALS_DIRECTORY")
    if directory and (Path(directory) / CREDENTIAL_NAME).is_file():
        return Path(directory) / CREDENTIAL_NAME
    if (run_secrets / CREDENTIAL_NAME).is_file():
        return run_secrets / CREDENTIAL_NAME
    return None


def read_password(path: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            f"cannot read the Redis password from {str(path)!r}: {exc.strerror}"
        ) from exc
    password = text.rstrip("\r\n")
    if not password:
        raise ConfigError(f"the Redis password file {str(path)!r} is empty")
    return password


def with_password(url: str, environ: Mapping[str, str], run_secrets: Path = RUN_SECRETS) -> str:
    """`url` with the password from the first configured source, if it has none of its own."""
    parts = split_url(url)
    if parts.password is not None or parts.scheme == "unix":
        return url  # a unix:// URL takes its password as a ?password= query parameter
    source = password_source(environ, run_secrets)
    if source is None:
        return url
    password = quote(read_password(source), safe="")
    user, _, host = parts.netloc.rpartition("@")  # the user as written (already URL-encoded)
    return parts._replace(netloc=f"{user}:{password}@{host}").geturl()
