"""The engine's queue: first come first served, cancellations pass the turn on, any loop."""

from __future__ import annotations

import asyncio
import threading

from envlab.models.turns import Turnstile


async def test_turns_go_in_order_of_arrival() -> None:
    turns = Turnstile()
    order: list[int] = []
    first = await turns.acquire()

    async def take(i: int) -> None:
        turn = await turns.acquire()
        order.append(i)
        assert turn.claim()
        turn.finish()

    waiters = [asyncio.create_task(take(i)) for i in range(5)]
    await asyncio.sleep(0)
    assert turns.waiting == 5
    assert first.claim()
    first.finish()
    await asyncio.gather(*waiters)
    assert order == [0, 1, 2, 3, 4] and turns.waiting == 0


async def test_a_cancelled_waiter_is_skipped_and_a_late_one_passes_the_turn_on() -> None:
    turns = Turnstile()
    held = await turns.acquire()
    a = asyncio.create_task(turns.acquire())
    b = asyncio.create_task(turns.acquire())
    c = asyncio.create_task(turns.acquire())
    await asyncio.sleep(0)
    a.cancel()  # gave up while waiting
    await asyncio.gather(a, return_exceptions=True)
    assert turns.waiting == 2
    turns.release()  # b's turn is scheduled ...
    b.cancel()  # ... and b gives up before it runs: the turn must reach c
    await asyncio.gather(b, return_exceptions=True)
    turn = await asyncio.wait_for(c, 30)
    assert turn.claim()
    turn.finish()
    assert held is not turn and turns.waiting == 0


async def test_an_abandoned_turn_passes_on_once() -> None:
    turns = Turnstile()
    first = await turns.acquire()
    nxt = asyncio.create_task(turns.acquire())
    await asyncio.sleep(0)
    first.abandon()  # the request gave up before a worker took the turn
    first.abandon()
    assert not first.claim()  # a worker that starts late does not use it
    second = await nxt
    assert second.claim()
    second.abandon()  # a worker took it: only the worker passes it on
    third = asyncio.create_task(turns.acquire())
    await asyncio.sleep(0)
    assert not third.done()
    second.finish()
    (await third).abandon()


def test_turns_are_shared_across_event_loops_and_threads() -> None:
    turns = Turnstile()
    log: list[str] = []
    other_has_it = threading.Event()
    main_may_go = threading.Event()

    def other_loop() -> None:
        async def hold() -> None:
            turn = await turns.acquire()
            assert turn.claim()
            log.append("other")
            other_has_it.set()
            await asyncio.to_thread(main_may_go.wait, 30)
            turn.finish()  # from this loop, to a waiter on the main loop

        asyncio.run(hold())

    thread = threading.Thread(target=other_loop)
    thread.start()
    assert other_has_it.wait(30)

    async def main() -> None:
        waiter = asyncio.create_task(turns.acquire())
        await asyncio.sleep(0)
        assert not waiter.done()
        main_may_go.set()
        turn = await asyncio.wait_for(waiter, 30)
        log.append("main")
        turn.abandon()

    asyncio.run(main())
    thread.join(30)
    assert log == ["other", "main"]
