"""The parts of an open store, as handed to recovery and cleanup (never the store).

Like Kafka's ``LogLoader``, which is handed the segments, checkpoints and caches of a
log rather than the log, :mod:`broker_core.recovery` and :mod:`broker_core.cleanup` get
these objects and use only their public methods.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker_core.commit_log import CommitLog
from broker_core.config import StoreConfig
from broker_core.consume_queue import ConsumeQueueIndex
from broker_core.consumer_state import ConsumerState
from broker_core.key_index import KeyIndex
from broker_core.lmq_table import LmqTable
from broker_core.locks import StoreLocks
from broker_core.origins import OriginTable
from broker_core.tail_cache import TailCache
from broker_core.timers import Timers
from broker_core.transactions import TransactionTable


@dataclass(frozen=True, slots=True)
class StoreParts:
    log: CommitLog
    index: ConsumeQueueIndex
    state: ConsumerState
    lmqs: LmqTable
    tail: TailCache
    locks: StoreLocks
    config: StoreConfig
    keys: KeyIndex
    timers: Timers
    #: Pending and ended transactions (broker_core.transactions).
    txns: TransactionTable
    #: Copies' high-water marks (broker_core.origins).
    origins: OriginTable
