"""Change notifications (coord_backends/change_notifications.py): a follower reloads at its
start, applies each later notification in order, and reloads when the last one it applied was
pruned unseen; a writer keeps the newest NOTIFICATIONS_KEPT."""

from __future__ import annotations

import asyncio

from replog.coord_backends import change_notifications
from replog.coord_backends.change_notifications import follow_notifications, notify
from tests.support.polling import eventually

PREFIX = "/changes/change_"


class Recorder:
    def __init__(self):
        self.reloads = 0
        self.applied: list[bytes] = []

    async def apply(self, value: bytes) -> None:
        self.applied.append(value)

    async def reload(self) -> None:
        self.reloads += 1


async def test_a_follower_reloads_once_then_applies_each_notification_in_order(store):
    await notify(store, PREFIX, b"before")
    recorder, loaded = Recorder(), asyncio.Event()
    follower = asyncio.create_task(follow_notifications(store, PREFIX, recorder.apply, recorder.reload, loaded))
    try:
        await asyncio.wait_for(loaded.wait(), 10)
        for value in (b"a", b"b", b"c"):
            await notify(store, PREFIX, value)
        await eventually(lambda: recorder.applied == [b"a", b"b", b"c"], 10, "the notifications applied")
        assert recorder.reloads == 1  # "before" was covered by the reload, not applied
    finally:
        follower.cancel()
        await asyncio.gather(follower, return_exceptions=True)


async def test_a_follower_that_missed_pruned_notifications_reloads(store, monkeypatch):
    monkeypatch.setattr(change_notifications, "NOTIFICATIONS_KEPT", 2)
    await notify(store, PREFIX, b"first")
    recorder, loaded = Recorder(), asyncio.Event()
    follower = asyncio.create_task(follow_notifications(store, PREFIX, recorder.apply, recorder.reload, loaded))
    await asyncio.wait_for(loaded.wait(), 10)
    follower.cancel()  # while it is away, its last notification is pruned
    await asyncio.gather(follower, return_exceptions=True)
    for value in (b"x", b"y", b"z"):
        await notify(store, PREFIX, value)
    assert len(await store.children("/changes")) == 2
    loaded.clear()
    follower = asyncio.create_task(follow_notifications(store, PREFIX, recorder.apply, recorder.reload, loaded))
    try:
        await asyncio.wait_for(loaded.wait(), 10)
        assert recorder.reloads == 2 and recorder.applied == []
    finally:
        follower.cancel()
        await asyncio.gather(follower, return_exceptions=True)


async def test_notifications_pruned_while_followed_make_it_reload(store, monkeypatch):
    recorder, loaded = Recorder(), asyncio.Event()
    follower = asyncio.create_task(follow_notifications(store, PREFIX, recorder.apply, recorder.reload, loaded))
    try:
        await asyncio.wait_for(loaded.wait(), 10)
        await notify(store, PREFIX, b"a")
        await eventually(lambda: recorder.applied == [b"a"], 10, "the first notification applied")
        monkeypatch.setattr(change_notifications, "NOTIFICATIONS_KEPT", 1)
        # applied or reloaded, nothing is missed: each batch of the watch either still holds
        # the last applied notification or finds it pruned and reloads
        for value in (b"b", b"c", b"d"):
            await store.create(PREFIX, value, sequential=True)
        names = sorted(await store.children("/changes"))
        for name in names[:-1]:
            await store.delete(f"/changes/{name}")
        await eventually(lambda: recorder.reloads == 2 or recorder.applied == [b"a", b"b", b"c", b"d"], 10, "catching up")
    finally:
        follower.cancel()
        await asyncio.gather(follower, return_exceptions=True)
