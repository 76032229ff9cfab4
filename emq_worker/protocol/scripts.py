"""The Lua scripts: read from `lua/*.lua` at start-up, loaded once, called by EVALSHA.

Each script's header declares its `KEYS[i] = emq:{q}:<name>` lines, and that header is the one
source of the keys a call passes: `Scripts.keys` fills a queue's prefix (and a job id) into the
names, in the header's order, so a wrapper cannot pass too few keys or two in the wrong order. On
NOSCRIPT (server restart, failover, SCRIPT FLUSH) the script is loaded again and the call retried
once. Error replies whose text starts with an EchoMQ class word become typed exceptions here, in
exactly one place. The RESENDABLE verbs are re-sent once on a fresh connection when theirs is lost
(valkey/resend_once.py); the others never are.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any, Final

from redis.asyncio import Redis
from redis.exceptions import NoScriptError, ResponseError

from emq_worker.errors import (
    KindError,
    LockedError,
    ProtocolReplyError,
    ScriptError,
    StateError,
)
from emq_worker.valkey.cluster import ClusterUnavailableError, is_moving
from emq_worker.valkey.resend_once import resend_once

_INCLUDE = re.compile(r"^--- @include (\w+)\s*$", re.MULTILINE)
_KEY_LINE = re.compile(r"^-- KEYS\[(\d+)\] = (\S+)", re.MULTILINE)
_KEY_NAME = re.compile(r"emq:\{q\}:((?:[a-z_]+|<id>)(?::(?:[a-z_]+|<id>))*)")
JOB_ID = "<id>"
_ERROR_CLASSES: Final[dict[str, type[ProtocolReplyError]]] = {
    "EMQKIND": KindError,
    "EMQLOCK": LockedError,
    "EMQSTATE": StateError,
}

VERBS: Final = (
    "enqueue",
    "claim",
    "renew",
    "settle",
    "release",
    "withdraw",
    "offer",
    "reap",
    "promote",
    "remove",
    "reprocess",
    "progress",
    "joblog",
    "repeat",
    "repeat_due",
    "upkeep",
    "drain",
    "obliterate",
    "history",
    "flow",
    "flow_deliver",
    "flow_ack",
    "lane_pause",
    "lane_resume",
    "lane_limit",
    "lanes",
    "payload_filter",
)
"""Every verb with a script, `lua/<verb>.lua`; each is built and loaded at start-up."""

RESENDABLE: Final = frozenset(
    {
        "renew",
        "claim",
        "settle",
        "enqueue",
        "reap",
        "promote",
        "upkeep",
        "offer",
        "flow",
        "flow_deliver",
        "flow_ack",
    }
)
"""The verbs re-sent once on a fresh connection when theirs is lost, also after the server may
have run the first sending (its reply lost): a second delivery is harmless by construction.
renew sets the same deadline-from-now for the same token and nonce; claim replies the jobs its
nonce's memo lists; settle finds its receipt and replies 'settled'; enqueue finds the rows its ids
already wrote (a duplicate, never a second row); reap and promote move only what is due by the
server clock, as the next beat would; flow finds its memo as enqueue does; flow_deliver counts a
child once (its id guards each count) and flow_ack removes an entry by its value; upkeep only
reads, and notes a check that found nothing due; offer only moves a standing offer's lapse to
its own now + offer_ms. The others (release, withdraw, remove,
reprocess, progress, joblog, repeat, repeat_due) are sent once: see docs/protocol.md, section 6."""

ArgValue = str | bytes | int


@dataclass(frozen=True, slots=True)
class LuaScript:
    name: str
    source: str
    sha: str
    keys: tuple[str, ...]
    """The header's key names after `emq:{q}:`, in KEYS order (`<id>` stands for a job id)."""

    @property
    def key_count(self) -> int:
        return len(self.keys)


def read_source(name: str) -> str:
    """`lua/<name>.lua`, each `--- @include x` line replaced by `lua/includes/x.lua` (itself
    expanded the same way; an include already inlined is not repeated)."""
    folder = resources.files("emq_worker.protocol") / "lua"
    try:
        text = (folder / f"{name}.lua").read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise ScriptError(f"no Lua script for verb {name!r} (lua/{name}.lua)") from exc

    included: set[str] = set()

    def include(match: re.Match[str]) -> str:
        # Includes may include others (fence needs wake); each is inlined once, where first named.
        name = match.group(1)
        if name in included:
            return ""
        included.add(name)
        source = (folder / "includes" / f"{name}.lua").read_text(encoding="utf-8")
        return _INCLUDE.sub(include, source)

    return _INCLUDE.sub(include, text)


@functools.cache
def wake_cap() -> int:
    """WAKE_TOKENS_KEPT, read from includes/wake.lua (the one place it is written), for the
    rare wake sent outside a script (a repeat registered or resumed)."""
    source = read_source("includes/wake")
    found = re.search(r"^local WAKE_TOKENS_KEPT = (\d+)$", source, re.MULTILINE)
    if found is None:
        raise ScriptError("includes/wake.lua does not define WAKE_TOKENS_KEPT")
    return int(found.group(1))


def declared_keys(source: str) -> tuple[str, ...]:
    """The key names of a script's `-- KEYS[i] = emq:{q}:<name>` header lines (numbered 1..n)."""
    lines = _KEY_LINE.findall(source)
    numbers = [int(number) for number, _ in lines]
    if numbers != list(range(1, len(numbers) + 1)):
        raise ScriptError(f"KEYS lines must be numbered 1..n in order; got {numbers}")
    names = []
    for number, key in lines:
        match = _KEY_NAME.fullmatch(key)
        if match is None:
            raise ScriptError(f"KEYS[{number}] must name a key emq:{{q}}:<name>; got {key!r}")
        names.append(match.group(1))
    return tuple(names)


def build(name: str) -> LuaScript:
    source = read_source(name)
    try:
        keys = declared_keys(source)
    except ScriptError as exc:
        raise ScriptError(f"lua/{name}.lua: {exc}") from exc
    sha = hashlib.sha1(source.encode(), usedforsecurity=False).hexdigest()
    return LuaScript(name=name, source=source, sha=sha, keys=keys)


def typed_error(error: ResponseError) -> Exception:
    """Map an error reply to a typed exception; an unknown reply stays a ResponseError."""
    text = str(error)
    word, _, detail = text.partition(" ")
    error_class = _ERROR_CLASSES.get(word)
    if error_class is not None:
        return error_class(word, detail)
    if word.startswith("EMQ"):
        return ProtocolReplyError(word, detail)
    if is_moving(error):
        return ClusterUnavailableError(text)  # a pipelined call met a slot in motion: retry later
    return error


class Scripts:
    """Every verb's script, built once; `call` runs one by EVALSHA with NOSCRIPT recovery."""

    def __init__(self) -> None:
        self.by_name: dict[str, LuaScript] = {name: build(name) for name in VERBS}

    async def load_all(self, client: Redis) -> None:
        """SCRIPT LOAD every script; fail fast naming the file the server rejects."""
        for script in self.by_name.values():
            await self._load(client, script)

    async def _load(self, client: Redis, script: LuaScript) -> None:
        try:
            with resend_once():  # SCRIPT LOAD of the same text is idempotent
                sha = await client.script_load(script.source)
        except ResponseError as exc:
            raise ScriptError(f"the server rejected lua/{script.name}.lua: {exc}") from exc
        if isinstance(sha, bytes):
            sha = sha.decode()
        if sha != script.sha:
            raise ScriptError(f"SCRIPT LOAD of lua/{script.name}.lua returned sha {sha}")

    def keys(self, name: str, prefix: str, job_id: str | None = None) -> list[str]:
        """The keys of a call of `name` on the queue whose prefix is `prefix` ("emq:{q}:"), in
        the order its header declares them; `job_id` fills a job's keys (`job:<id>...`)."""
        keys = []
        for key in self.by_name[name].keys:
            if JOB_ID in key:
                if job_id is None:
                    raise ScriptError(f"{name} names a job's key ({key}); no job id given")
                key = key.replace(JOB_ID, job_id)
            keys.append(prefix + key)
        return keys

    async def call(
        self, client: Redis, name: str, keys: Sequence[str], args: Sequence[ArgValue]
    ) -> Any:
        script = self.by_name[name]
        if len(keys) != script.key_count:
            raise ScriptError(f"{name} takes {script.key_count} keys; got {len(keys)}")
        try:
            with resend_once(name in RESENDABLE):
                try:
                    return await client.evalsha(script.sha, len(keys), *keys, *args)
                except NoScriptError:
                    await self._load(client, script)
                    return await client.evalsha(script.sha, len(keys), *keys, *args)
        except ResponseError as exc:
            raise typed_error(exc) from exc

    async def call_pipelined(
        self, client: Redis, name: str, calls: Sequence[tuple[Sequence[str], Sequence[ArgValue]]]
    ) -> list[Any]:
        """Several calls of one script in one round trip (a pipeline of EVALSHAs).

        A pipeline gets no NOSCRIPT recovery from the server's side, so on NOSCRIPT the script is
        loaded and the whole pipeline sent again: only for idempotent verbs (renew).
        """
        script = self.by_name[name]
        for _ in range(2):
            async with client.pipeline(transaction=False) as pipe:
                for keys, args in calls:
                    # Not pipe.evalsha: redis-py's cluster pipeline blocks that method, though it
                    # routes EVALSHA by its keys like any keyed command.
                    pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)
                with resend_once(name in RESENDABLE):
                    replies: list[Any] = await pipe.execute(raise_on_error=False)
            if not any(isinstance(reply, NoScriptError) for reply in replies):
                break
            await self._load(client, script)
        for reply in replies:
            if isinstance(reply, ResponseError):
                raise typed_error(reply) from reply
            if isinstance(reply, Exception):
                raise reply  # a cluster re-sent a redirected call alone, and it failed
        return replies
