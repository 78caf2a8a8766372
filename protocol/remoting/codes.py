"""RocketMQ remoting numbers: request and response codes, languages, flags.

The values are RocketMQ's own (``RequestCode.java``, ``ResponseCode.java``,
``RemotingSysResponseCode.java``, ``LanguageCode.java``, ``MessageSysFlag.java``,
``PullSysFlag.java``, ``PermName.java``); a client compares them as plain integers, so
they must never be renumbered. Only the codes the gateway or its tests meet are listed;
a command may carry any other integer, the enums are for naming, not for validation.
"""

from __future__ import annotations

from enum import IntEnum, IntFlag


class RequestCode(IntEnum):
    SEND_MESSAGE = 10
    PULL_MESSAGE = 11
    QUERY_MESSAGE = 12
    QUERY_CONSUMER_OFFSET = 14
    UPDATE_CONSUMER_OFFSET = 15
    UPDATE_AND_CREATE_TOPIC = 17
    GET_ALL_TOPIC_CONFIG = 21
    GET_BROKER_RUNTIME_INFO = 28
    SEARCH_OFFSET_BY_TIMESTAMP = 29
    GET_MAX_OFFSET = 30
    GET_MIN_OFFSET = 31
    GET_EARLIEST_MSG_STORETIME = 32
    VIEW_MESSAGE_BY_ID = 33
    HEART_BEAT = 34
    UNREGISTER_CLIENT = 35
    CONSUMER_SEND_MSG_BACK = 36
    END_TRANSACTION = 37
    GET_CONSUMER_LIST_BY_GROUP = 38
    CHECK_TRANSACTION_STATE = 39
    NOTIFY_CONSUMER_IDS_CHANGED = 40
    LOCK_BATCH_MQ = 41
    UNLOCK_BATCH_MQ = 42
    GET_KV_CONFIG = 101
    GET_ROUTEINFO_BY_TOPIC = 105
    GET_BROKER_CLUSTER_INFO = 106
    UPDATE_AND_CREATE_SUBSCRIPTIONGROUP = 200
    GET_ALL_SUBSCRIPTIONGROUP_CONFIG = 201
    GET_TOPIC_STATS_INFO = 202
    GET_CONSUMER_CONNECTION_LIST = 203
    GET_ALL_TOPIC_LIST_FROM_NAMESERVER = 206
    GET_CONSUME_STATS = 208
    RESET_CONSUMER_CLIENT_OFFSET = 220
    GET_CONSUMER_STATUS_FROM_CLIENT = 221
    QUERY_TOPIC_CONSUME_BY_WHO = 300
    GET_CONSUMER_RUNNING_INFO = 307
    CONSUME_MESSAGE_DIRECTLY = 309
    SEND_MESSAGE_V2 = 310
    SEND_BATCH_MESSAGE = 320
    SEND_REPLY_MESSAGE = 324
    SEND_REPLY_MESSAGE_V2 = 325
    PUSH_REPLY_MESSAGE_TO_CLIENT = 326
    QUERY_TOPICS_BY_CONSUMER = 343
    GET_TOPIC_CONFIG = 351
    GET_SUBSCRIPTIONGROUP_CONFIG = 352
    LITE_PULL_MESSAGE = 361
    RECALL_MESSAGE = 370
    QUERY_ASSIGNMENT = 400
    SET_MESSAGE_REQUEST_MODE = 401
    # RocketMQ 5's pop family. These exceed the binary header's i16 code field, so a
    # command carrying one can only travel with a JSON header (see command.py).
    POP_MESSAGE = 200050
    ACK_MESSAGE = 200051
    PEEK_MESSAGE = 200052
    CHANGE_MESSAGE_INVISIBLETIME = 200053
    NOTIFICATION = 200054
    POLLING_INFO = 200055
    BATCH_ACK_MESSAGE = 200151
    # LMQ Gateway's own requests (issue 19's connector; protocol/remoting/origins.py).
    # RocketMQ's RequestCode.java uses 10..~1000, 1001.. (controller), 2001.. (static
    # topics), 3001.. (ACL users) and 200050..; 29000-29099 is free and fits the binary
    # header's i16.
    LMQ_GET_CLUSTER_ID = 29001
    LMQ_QUERY_ORIGINS = 29002
    LMQ_ADVANCE_ORIGIN = 29003
    LMQ_TRANSLATE_OFFSETS = 29004


class ResponseCode(IntEnum):
    SUCCESS = 0
    SYSTEM_ERROR = 1
    SYSTEM_BUSY = 2
    REQUEST_CODE_NOT_SUPPORTED = 3
    TRANSACTION_FAILED = 4
    FLUSH_DISK_TIMEOUT = 10
    SLAVE_NOT_AVAILABLE = 11
    FLUSH_SLAVE_TIMEOUT = 12
    MESSAGE_ILLEGAL = 13
    SERVICE_NOT_AVAILABLE = 14
    VERSION_NOT_SUPPORTED = 15
    NO_PERMISSION = 16
    TOPIC_NOT_EXIST = 17
    TOPIC_EXIST_ALREADY = 18
    PULL_NOT_FOUND = 19
    PULL_RETRY_IMMEDIATELY = 20
    PULL_OFFSET_MOVED = 21
    QUERY_NOT_FOUND = 22
    SUBSCRIPTION_PARSE_FAILED = 23
    SUBSCRIPTION_NOT_EXIST = 24
    SUBSCRIPTION_NOT_LATEST = 25
    SUBSCRIPTION_GROUP_NOT_EXIST = 26
    FILTER_DATA_NOT_EXIST = 27
    FILTER_DATA_NOT_LATEST = 28
    INVALID_PARAMETER = 29
    TRANSACTION_SHOULD_COMMIT = 200
    TRANSACTION_SHOULD_ROLLBACK = 201
    TRANSACTION_STATE_UNKNOW = 202
    TRANSACTION_STATE_GROUP_WRONG = 203
    NO_BUYER_ID = 204
    NOT_IN_CURRENT_UNIT = 205
    CONSUMER_NOT_ONLINE = 206
    CONSUME_MSG_TIMEOUT = 207
    NO_MESSAGE = 208
    POLLING_FULL = 209
    POLLING_TIMEOUT = 210
    BROKER_NOT_EXIST = 211
    BROKER_DISPATCH_NOT_COMPLETE = 212
    BROADCAST_CONSUMPTION = 213
    FLOW_CONTROL = 215
    NOT_LEADER_FOR_QUEUE = 501
    ILLEGAL_OPERATION = 604
    GO_AWAY = 1500
    USER_NOT_EXIST = 3001
    POLICY_NOT_EXIST = 3002


class LanguageCode(IntEnum):
    """The client's language: a byte in the binary header, the member name in JSON."""

    JAVA = 0
    CPP = 1
    DOTNET = 2
    PYTHON = 3
    DELPHI = 4
    ERLANG = 5
    RUBY = 6
    OTHER = 7
    HTTP = 8
    GO = 9
    PHP = 10
    OMS = 11
    RUST = 12
    NODE_JS = 13


class SerializeType(IntEnum):
    """The header's encoding, the top byte of the frame's header-length word."""

    JSON = 0
    ROCKETMQ = 1


class SysFlag(IntFlag):
    """A message's ``sysFlag`` (``MessageSysFlag``).

    The transaction type is the two-bit field ``TRANSACTION_MASK`` (0 none, 4 prepared,
    8 commit, 12 rollback) and the compression type the three-bit field
    ``COMPRESSION_MASK`` (0 or 0x300 zlib, 0x100 LZ4, 0x200 zstd); test them by masking,
    not as single bits.
    """

    COMPRESSED = 0x1
    MULTI_TAGS = 0x2
    TRANSACTION_PREPARED = 0x4
    TRANSACTION_COMMIT = 0x8
    TRANSACTION_ROLLBACK = 0xC
    TRANSACTION_MASK = 0xC
    BORNHOST_V6 = 0x10
    STOREHOST_V6 = 0x20
    NEED_UNWRAP = 0x40
    INNER_BATCH = 0x80
    COMPRESSION_LZ4 = 0x100
    COMPRESSION_ZSTD = 0x200
    COMPRESSION_ZLIB = 0x300
    COMPRESSION_MASK = 0x700


class PullSysFlag(IntFlag):
    """The ``sysFlag`` of a pull request (``PullSysFlag``)."""

    COMMIT_OFFSET = 0x1
    SUSPEND = 0x2
    SUBSCRIPTION = 0x4
    CLASS_FILTER = 0x8
    LITE_PULL_MESSAGE = 0x10


class Perm(IntFlag):
    """Topic permissions in route data (``PermName``)."""

    INHERIT = 0x1
    WRITE = 0x2
    READ = 0x4
    PRIORITY = 0x8


#: The binary (ROCKETMQ) header writes the code as a signed 16-bit integer.
I16_MIN = -(1 << 15)
I16_MAX = (1 << 15) - 1
