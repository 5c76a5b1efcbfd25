"""The coordinator's keyed timers: earliest first, rescheduling replaces, cancelled ones never
fire, and the heap stays bounded by the live timers however often keys are rescheduled."""

from replog.groups.timers import Timers


def test_timers_fire_in_deadline_order_and_rescheduling_replaces():
    fired, earlier = [], []
    timers = Timers(lambda: earlier.append(True))
    timers.schedule("b", 20, lambda: fired.append("b"))
    timers.schedule("a", 10, lambda: fired.append("a"))
    timers.schedule("b", 5, lambda: fired.append("b again"))
    timers.schedule("c", 30, lambda: fired.append("c"))
    timers.cancel("c")
    assert len(earlier) == 3  # b first, then a and b again were each earlier than all others
    assert timers.next_deadline_ms() == 5
    assert timers.fire_due(9) == 1 and fired == ["b again"]
    assert timers.fire_due(100) == 1 and fired == ["b again", "a"]
    assert timers.next_deadline_ms() is None and len(timers) == 0


def test_an_action_may_schedule_more_and_matching_keys_cancel_together():
    fired = []
    timers = Timers()
    timers.schedule(("session", "g", "m1"), 10, lambda: timers.schedule(("session", "g", "m1"), 15, lambda: fired.append(15)))
    timers.schedule(("join", "g"), 12, lambda: fired.append("join"))
    timers.schedule(("join", "other"), 12, lambda: fired.append("other"))
    assert timers.fire_due(10) == 1
    timers.cancel_matching(lambda key: key[1] == "g")
    assert timers.fire_due(20) == 1 and fired == ["other"]


def test_the_heap_stays_bounded_by_the_live_timers():
    timers = Timers()
    for deadline in range(10_000):
        timers.schedule("session", deadline, lambda: None)
    assert len(timers) == 1
    assert len(timers._heap) <= 2 * len(timers) + 64 + 1
