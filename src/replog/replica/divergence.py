"""Where a follower's log diverges from its new leader's (KIP-101): the offset a follower cuts
its log at, from the leader's answer to OffsetForLeaderEpoch for the follower's latest epoch.

Why not truncate to the follower's high watermark, as the design replicated before KIP-101 did:
a follower learns the HW one fetch after the leader advanced it, so its HW may lag what is
committed. (1) Data loss: a follower that restarts and cuts to its HW drops messages the leader
already acknowledged; if the leader then dies and this follower is elected, they are gone.
(2) Divergence: after both crash, a replica that comes back first with a shorter log leads and
writes new messages at offsets the other still holds with old data; the other cuts only to its
(higher) HW, keeps its old messages at those offsets, and the replicas hold different data at
one offset forever. Cutting where the leader's epoch ended instead removes exactly what the
leader does not have, and nothing it has.
"""

from typing import NamedTuple

from replog.replica.results import EpochEndOffset
from replog.storage.checkpoint import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET, LeaderEpochCache


class Divergence(NamedTuple):
    offset: int  # where to cut: at most the log end
    complete: bool  # False: ask the leader again, about the latest epoch left after the cut
    reason: str


def divergence(epochs: LeaderEpochCache, leader_epoch_end: EpochEndOffset, log_end_offset: int,
               high_watermark: int) -> Divergence:
    """Where to cut, given the leader's answer for our latest epoch: the largest epoch <= ours
    the leader knows, and where it ended there.

    If the leader's epoch is older than ours and we do not know it, our log may diverge even
    earlier: we cut to where our own largest epoch below it ended and ask again. Each such round
    drops at least our latest epoch, so the rounds are bounded by the epochs in our cache, as in
    Kafka's fetcher."""
    epoch, own_end = UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
    if leader_epoch_end.leader_epoch != UNDEFINED_EPOCH and leader_epoch_end.end_offset != UNDEFINED_EPOCH_OFFSET:
        epoch, own_end = epochs.end_offset_for(leader_epoch_end.leader_epoch, log_end_offset)
    if epoch == UNDEFINED_EPOCH:
        # The leader knows no epoch <= ours, or we none at or below its answer: nothing tells
        # us where we diverge, so fall back to Kafka's pre-KIP-101 rule, cutting to our HW,
        # with the data loss and divergence problems described above.
        offset, complete, reason = high_watermark, True, "no common leader epoch: high watermark"
    elif epoch == leader_epoch_end.leader_epoch:
        offset, complete, reason = min(own_end, leader_epoch_end.end_offset), True, "leader epoch end"
    else:
        offset, complete, reason = own_end, False, "leader epoch unknown here: end of our older epoch"
    return Divergence(min(offset, log_end_offset), complete, reason)
