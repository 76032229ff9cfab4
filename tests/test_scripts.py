"""The Lua scripts: each header declares as many KEYS as its wrapper passes; includes resolve."""

from __future__ import annotations

import re

import pytest
from redis.asyncio import Redis

from emq_worker.errors import ScriptError
from emq_worker.protocol.keys import QueueKeys
from emq_worker.protocol.scripts import VERBS, Scripts, declared_keys, read_source


@pytest.mark.parametrize("verb", VERBS)
def test_header_declares_keys_argv_and_reply(verb: str) -> None:
    source = read_source(verb)
    keys = declared_keys(source)
    assert re.search(r"^-- ARGV\[1\] = ", source, re.MULTILINE), f"{verb}: no ARGV lines"
    assert re.search(r"^-- Reply: ", source, re.MULTILINE), f"{verb}: no Reply line"
    assert "@include" not in source
    used = {int(n) for n in re.findall(r"KEYS\[(\d+)\]", source)}
    assert used == set(range(1, len(keys) + 1)), f"{verb}: KEYS used {sorted(used)}"


def test_a_call_passes_the_keys_its_header_names_in_their_order() -> None:
    scripts = Scripts()
    prefix = QueueKeys.of("orders").prefix
    assert scripts.keys("promote", prefix) == [
        "emq:{orders}:schedule",
        "emq:{orders}:pending",
        "emq:{orders}:wake",
    ]
    assert scripts.keys("joblog", prefix, "JOB00000000001") == [
        "emq:{orders}:job:JOB00000000001:logs"
    ]
    with pytest.raises(ScriptError, match=r"joblog names a job's key \(job:<id>:logs\)"):
        scripts.keys("joblog", prefix)


def test_a_header_that_disagrees_is_refused_naming_the_file() -> None:
    with pytest.raises(ScriptError, match=r"numbered 1..n"):
        declared_keys("-- KEYS[1] = emq:{q}:a\n-- KEYS[3] = emq:{q}:b\n")
    with pytest.raises(ScriptError, match=r"KEYS\[1\] must name a key emq:\{q\}:<name>; got 'a'"):
        declared_keys("-- KEYS[1] = a\n")
    with pytest.raises(ScriptError, match="no Lua script for verb 'nosuch'"):
        read_source("nosuch")


async def test_every_script_loads_and_matches_its_sha(client: Redis) -> None:
    scripts = Scripts()
    await client.script_flush()
    await scripts.load_all(client)
    exists = await client.script_exists(*(s.sha for s in scripts.by_name.values()))
    assert all(exists)
