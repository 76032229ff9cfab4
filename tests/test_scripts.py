"""The Lua scripts: each header declares as many KEYS as its wrapper passes; includes resolve."""

from __future__ import annotations

import re

import pytest
from redis.asyncio import Redis

from emq_worker.errors import ScriptError
from emq_worker.protocol.scripts import KEY_COUNTS, Scripts, build, declared_key_count, read_source


@pytest.mark.parametrize("verb", sorted(KEY_COUNTS))
def test_header_declares_keys_argv_and_reply(verb: str) -> None:
    source = read_source(verb)
    assert declared_key_count(source) == KEY_COUNTS[verb]
    assert re.search(r"^-- ARGV\[1\] = ", source, re.MULTILINE), f"{verb}: no ARGV lines"
    assert re.search(r"^-- Reply: ", source, re.MULTILINE), f"{verb}: no Reply line"
    assert "@include" not in source
    used = {int(n) for n in re.findall(r"KEYS\[(\d+)\]", source)}
    assert used == set(range(1, KEY_COUNTS[verb] + 1)), f"{verb}: KEYS used {sorted(used)}"


def test_a_header_that_disagrees_is_refused_naming_the_file() -> None:
    with pytest.raises(ScriptError, match=r"numbered 1..n"):
        declared_key_count("-- KEYS[1] = a\n-- KEYS[3] = b\n")
    with pytest.raises(ScriptError, match="no Lua script for verb 'nosuch'"):
        read_source("nosuch")
    declared = KEY_COUNTS["claim"]
    KEY_COUNTS["claim"] += 1
    try:
        with pytest.raises(
            ScriptError, match=rf"lua/claim.lua declares {declared} KEYS but its wrapper"
        ):
            build("claim")
    finally:
        KEY_COUNTS["claim"] -= 1


async def test_every_script_loads_and_matches_its_sha(client: Redis) -> None:
    scripts = Scripts()
    await client.script_flush()
    await scripts.load_all(client)
    exists = await client.script_exists(*(s.sha for s in scripts.by_name.values()))
    assert all(exists)
