"""Epoch histories: where each master epoch starts in the log, and where a returning
member's log leaves the master's.

Every member keeps its history, a list of ``(epoch, start)`` entries: from log
position ``start`` on, the records were written by the master of ``epoch`` (RocketMQ's
EpochFile, Kafka's leader-epoch checkpoint). Epochs strictly rise, starts never fall.
Records before the first entry belong to epoch 0 (a store written before it joined a
group). A slave copies the entries with the records (a chunk of the stream never spans
two epochs), so two members hold the same bytes up to the end of the last epoch both
know, and no further than the shorter log of the two.
"""

from __future__ import annotations

from typing import NamedTuple


class EpochEntry(NamedTuple):
    epoch: int
    start: int


class EpochError(ValueError):
    """A history that cannot be right, or a member ahead of the master's epoch."""


def check_history(entries: list[EpochEntry]) -> None:
    """Raise :class:`EpochError` unless epochs strictly rise and starts never fall."""
    for before, after in zip(entries, entries[1:], strict=False):
        if after.epoch <= before.epoch or after.start < before.start:
            raise EpochError(f"epoch history out of order: {tuple(before)} then {tuple(after)}")


def last_epoch(entries: list[EpochEntry]) -> int:
    return entries[-1].epoch if entries else 0


def end_of_epoch(entries: list[EpochEntry], log_end: int, epoch: int) -> tuple[int, int]:
    """``(e, end)``: ``e`` the largest epoch of the history at or below ``epoch`` (0 if
    none), ``end`` where its records end in this log (the next entry's start, or
    ``log_end``)."""
    found = 0
    end = entries[0].start if entries else log_end
    for i, entry in enumerate(entries):
        if entry.epoch > epoch:
            break
        found = entry.epoch
        end = entries[i + 1].start if i + 1 < len(entries) else log_end
    return found, min(end, log_end)


def divergence(
    master: list[EpochEntry], master_end: int, member: list[EpochEntry], member_end: int
) -> int:
    """Where a member joining ``master`` must cut its log: the end of the last epoch both
    hold, and not past either log's end (Kafka's KIP-101/279 in one step: the member's
    last epoch, looked up in the master's history, then that epoch looked up in the
    member's). Raises :class:`EpochError` when the member knows an epoch newer than the
    master's own: then the master is the stale one."""
    mine = last_epoch(member)
    if mine > last_epoch(master):
        raise EpochError(
            f"the member's log has epoch {mine}, newer than this master's epoch"
            f" {last_epoch(master)}: this master is stale"
        )
    common, master_cut = end_of_epoch(master, master_end, mine)
    _, member_cut = end_of_epoch(member, member_end, common)
    return min(member_end, master_cut, member_cut)


def cut_history(entries: list[EpochEntry], end: int) -> list[EpochEntry]:
    """The entries of a log cut at ``end``: those starting at or before it (an entry
    starting exactly at the end is kept: its epoch wrote nothing yet, but it is the
    member's latest)."""
    return [e for e in entries if e.start <= end]
