"""The simulated users: the scripted one's behaviours, and the model-backed one against the
embedded model served over HTTP on 127.0.0.1."""

from __future__ import annotations

import pytest

from envlab.core import InfraError
from envlab.envs.tau.db import load_json
from envlab.envs.tau.users import STOP, Facts, ScriptedUser

RETAIL = "You are Yusuf Rossi in 19122. You received your order #W2378156 and wish to exchange it."
AIRLINE = "Your user id is mia_li_3668. You want to fly from New York to Seattle on May 20."
EMAIL = "You name is Sofia Thomas and your email is a.b3019@example.com or a.b3069@example.com."


def test_facts_come_from_every_instruction_of_the_data() -> None:
    for domain, splits in (("retail", ("test", "train", "dev")), ("airline", ("test",))):
        for split in splits:
            for row in load_json(domain, f"tasks_{split}.json"):
                f = Facts.of(row["instruction"])
                assert f.user_id or f.email or (f.first_name and f.zip), row["instruction"][:80]
                if f.user_id:
                    assert f.user_id == row["user_id"]


async def test_the_opening_states_the_request_and_holds_the_identity_back() -> None:
    user = ScriptedUser(RETAIL)
    opening = await user.start()
    assert "#W2378156" in opening and "exchange" in opening
    assert "Rossi" not in opening and "19122" not in opening
    assert "I received" in opening  # said in the first person


async def test_identity_facts_are_given_when_asked() -> None:
    user = ScriptedUser(RETAIL)
    await user.start()
    reply = await user.reply("Could you tell me your name and zip code?")
    assert "Yusuf Rossi" in reply and "19122" in reply and STOP not in reply
    airline = ScriptedUser(AIRLINE)
    await airline.start()
    assert "mia_li_3668" in await airline.reply("What is your user id?")
    both = ScriptedUser(EMAIL)
    await both.start()
    assert "a.b3019@example.com or a.b3069@example.com" in await both.reply("Your email?")


async def test_the_user_confirms_when_asked_and_stops_when_done() -> None:
    user = ScriptedUser(RETAIL)
    await user.start()
    assert (await user.reply("Shall I proceed with the exchange (yes/no)?")).startswith("Yes")
    assert STOP in await user.reply("The exchange has been processed successfully.")


async def test_the_user_stops_after_its_turn_limit() -> None:
    user = ScriptedUser(RETAIL, max_turns=3)
    await user.start()
    replies = [await user.reply("Hmm.") for _ in range(3)]
    assert STOP not in replies[0] and STOP in replies[-1]


async def test_a_dead_user_endpoint_is_the_machinerys_failure() -> None:
    from envlab.envs.tau.model_user import ModelUser
    from envlab.models.server import free_port

    user = ModelUser.from_spec(f"openai:m@http://127.0.0.1:{free_port()}/v1", RETAIL)
    user.model.retry = type(user.model.retry)(max_retries=0, backoff_s=0.0)
    with pytest.raises(InfraError):
        await user.start()
    await user.close()
