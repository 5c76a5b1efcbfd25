"""Adding and removing brokers, through either Admin, as `replog cluster add-brokers|remove-brokers`
runs it: the plan (admin/cluster.py decides it), then on request its moves started, waited for
until none is in flight, leadership moved to the planned preferred leaders and, for a removal,
the removed brokers' state-change paths deleted."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Callable, Collection

from replog.admin import cluster
from replog.admin.planner import Plan

from .admin_interface import Admin

MOVES_POLL_S = 0.5  # how often a wait for a plan's moves asks again

# A context for the wait for a plan's moves, giving the callback told (done, total) after each look.
Progress = Callable[[Plan], contextlib.AbstractContextManager[Callable[[int, int], None]]]


@dataclasses.dataclass(frozen=True)
class MembershipChange:
    plan: Plan
    elections: list[cluster.ElectionResult]  # none unless executed
    removal: cluster.Removal | None  # a removal executed only


async def change_membership(admin: Admin, *, add: Collection[int] = (), remove: Collection[int] = (), execute: bool,
                            show_plan: Callable[[Plan], None], progress: Progress) -> MembershipChange:
    """Plan and `show_plan(plan)`; executing, start the moves, wait for them, lead as planned
    and, removing, finish the removal."""
    plan = await admin.plan_membership(add=add, remove=remove)
    show_plan(plan)
    if not execute:
        return MembershipChange(plan, [], None)
    await execute_plan(admin, plan)
    with progress(plan) as advance:
        await wait_for_moves(admin, plan, advance)
    elections = await lead_as_planned(admin, plan)
    return MembershipChange(plan, elections, await admin.finish_removal(remove) if remove else None)


async def execute_plan(admin: Admin, plan: Plan) -> None:
    """Start every move of the plan; the first refusal, if any, as an error (the others go on)."""
    cluster.raise_refusals(await admin.alter_reassignments(cluster.plan_targets(plan)))


async def wait_for_moves(admin: Admin, plan: Plan, on_progress: Callable[[int, int], None]) -> None:
    """Until no move of the plan is in flight; `on_progress(done, total)` after each look. Not
    bounded: moves copy whole partitions, and go on in the cluster if the wait is abandoned."""
    keys = list(cluster.plan_targets(plan))
    while True:  # until every move has completed
        in_flight = len(await admin.list_reassignments(keys))
        on_progress(len(keys) - in_flight, len(keys))
        if not in_flight:
            return
        await asyncio.sleep(MOVES_POLL_S)


async def lead_as_planned(admin: Admin, plan: Plan) -> list[cluster.ElectionResult]:
    """A preferred election of the moved partitions, once their moves completed: the plan
    balanced the preferred leaders, and leadership follows them now rather than at each
    leader's next leader.imbalance.check.interval (or never, with auto.leader.rebalance.enable
    off)."""
    return await admin.elect_partitions(cluster.ElectionType.PREFERRED, list(cluster.plan_targets(plan)))
