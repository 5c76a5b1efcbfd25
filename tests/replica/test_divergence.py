"""Where a follower cuts its log for a new leader (KIP-101), from the leader's answer about the
follower's latest epoch: the offsets of the log the follower keeps."""

from kio.schema.errors import ErrorCode

from replog.replica.divergence import divergence
from replog.replica.results import EpochEndOffset
from replog.storage.checkpoint import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET, LeaderEpochCache

LOG_END, HIGH_WATERMARK = 30, 12


def epochs(directory, *entries: tuple[int, int]) -> LeaderEpochCache:
    directory.mkdir(parents=True, exist_ok=True)
    cache = LeaderEpochCache(directory / "leader-epoch-checkpoint")
    for epoch, start_offset in entries:
        cache.assign(epoch, start_offset)
    return cache


def test_a_shared_epoch_cuts_where_the_shorter_of_the_two_ended(tmp_path):
    ours = epochs(tmp_path, (1, 0), (3, 10), (4, 20))
    assert divergence(ours, EpochEndOffset(ErrorCode.none, 3, 15), LOG_END, HIGH_WATERMARK) == (15, True, "leader epoch end")
    assert divergence(ours, EpochEndOffset(ErrorCode.none, 3, 25), LOG_END, HIGH_WATERMARK)[:2] == (20, True)


def test_an_epoch_we_never_had_cuts_at_our_older_epoch_and_asks_again(tmp_path):
    """The leader's largest epoch at or below ours is 2, which we never saw: our log may diverge
    from the end of our epoch 1 on, so we cut there and ask about epoch 1."""
    ours = epochs(tmp_path, (1, 0), (3, 10))
    assert divergence(ours, EpochEndOffset(ErrorCode.none, 2, 8), LOG_END, HIGH_WATERMARK)[:2] == (10, False)


def test_no_common_epoch_falls_back_to_the_high_watermark(tmp_path):
    ours = epochs(tmp_path, (3, 10))
    unknown = EpochEndOffset(ErrorCode.none, UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
    assert divergence(ours, unknown, LOG_END, HIGH_WATERMARK) == (HIGH_WATERMARK, True,
                                                                  "no common leader epoch: high watermark")
    assert divergence(epochs(tmp_path / "none"), EpochEndOffset(ErrorCode.none, 3, 20), LOG_END, HIGH_WATERMARK)[:2] \
        == (HIGH_WATERMARK, True), "we know no epoch at all"


def test_the_cut_never_passes_our_log_end(tmp_path):
    unknown = EpochEndOffset(ErrorCode.none, UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
    assert divergence(epochs(tmp_path), unknown, LOG_END, high_watermark=LOG_END + 5).offset == LOG_END
    ours = epochs(tmp_path / "ours", (1, 0), (3, 10))
    assert divergence(ours, EpochEndOffset(ErrorCode.none, 3, 50), LOG_END, HIGH_WATERMARK).offset == LOG_END
