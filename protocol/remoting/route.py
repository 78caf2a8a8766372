"""GET_ROUTEINFO_BY_TOPIC's body: which brokers serve a topic, with how many queues.

Shape (``TopicRouteData``)::

    {"brokerDatas":[{"brokerAddrs":{0:"127.0.0.1:10911"},"brokerName":"b","cluster":"c",
                     "enableActingMaster":false}],
     "filterServerTable":{},
     "queueDatas":[{"brokerName":"b","perm":6,"readQueueNums":4,"topicSysFlag":0,
                    "writeQueueNums":4}]}

A name server writes it with fastjson, whose ``Long`` map keys come out unquoted as above;
RocketMQ 5's proxy writes standard JSON (quoted ``"0"``) when the request's version is at
least V4_9_4 (401) or it sets ``acceptStandardJsonOnly``. :meth:`TopicRouteData.serialize`
writes either (``standard=``), :meth:`TopicRouteData.parse` reads both.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .codes import Perm
from .errors import BodyError
from .json_body import get_bool, get_int, get_objects, get_str, load_object

#: ``MQVersion.Version.V4_9_4.ordinal()``: from here on clients read standard JSON.
STANDARD_JSON_VERSION = 401
MASTER_ID = 0


def wants_standard_json(version: int, accept_standard_json_only: bool | None) -> bool:
    """The proxy's rule for which dialect a route request gets."""
    return bool(accept_standard_json_only) or version >= STANDARD_JSON_VERSION


@dataclass(frozen=True, slots=True)
class QueueData:
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int = Perm.READ | Perm.WRITE
    topic_sys_flag: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "brokerName": self.broker_name,
            "perm": int(self.perm),
            "readQueueNums": self.read_queue_nums,
            "topicSysFlag": self.topic_sys_flag,
            "writeQueueNums": self.write_queue_nums,
        }


@dataclass(frozen=True, slots=True)
class BrokerData:
    cluster: str
    broker_name: str
    broker_addrs: dict[int, str]  # broker id (0 is the master) -> "host:port"
    enable_acting_master: bool = False

    @property
    def master_addr(self) -> str | None:
        return self.broker_addrs.get(MASTER_ID)


@dataclass(frozen=True, slots=True)
class TopicRouteData:
    queue_datas: tuple[QueueData, ...]
    broker_datas: tuple[BrokerData, ...]
    order_topic_conf: str | None = None

    def serialize(self, *, standard: bool = True) -> bytes:
        # Standard JSON is what fastjson's BrowserCompatible writes: non-ASCII escaped.
        ascii_only = standard
        brokers = []
        for b in self.broker_datas:
            addrs = ",".join(
                f"{json.dumps(str(k)) if standard else int(k)}:{_j(v, ascii_only)}"
                for k, v in sorted(b.broker_addrs.items())
            )
            brokers.append(
                f'{{"brokerAddrs":{{{addrs}}},"brokerName":{_j(b.broker_name, ascii_only)},'
                f'"cluster":{_j(b.cluster, ascii_only)},'
                f'"enableActingMaster":{"true" if b.enable_acting_master else "false"}}}'
            )
        queues = ",".join(_j(q.to_json(), ascii_only) for q in self.queue_datas)
        order = (
            f'"orderTopicConf":{_j(self.order_topic_conf, ascii_only)},'
            if self.order_topic_conf
            else ""
        )
        text = (
            f'{{"brokerDatas":[{",".join(brokers)}],"filterServerTable":{{}},'
            f'{order}"queueDatas":[{queues}]}}'
        )
        return text.encode()

    @classmethod
    def parse(cls, body: bytes) -> TopicRouteData:
        obj = load_object(body, "route")
        queues = []
        for q in get_objects(obj, "queueDatas"):
            name = get_str(q, "brokerName")
            if name is None:
                raise BodyError("queue data without a brokerName")
            queues.append(
                QueueData(
                    broker_name=name,
                    read_queue_nums=get_int(q, "readQueueNums"),
                    write_queue_nums=get_int(q, "writeQueueNums"),
                    perm=get_int(q, "perm"),
                    topic_sys_flag=get_int(q, "topicSysFlag"),
                )
            )
        brokers = []
        for b in get_objects(obj, "brokerDatas"):
            name = get_str(b, "brokerName")
            if name is None:
                raise BodyError("broker data without a brokerName")
            raw = b.get("brokerAddrs") or {}
            if not isinstance(raw, dict):
                raise BodyError("body field brokerAddrs: not an object")
            addrs: dict[int, str] = {}
            for key, value in raw.items():
                try:
                    broker_id = int(key)
                except ValueError:
                    raise BodyError(f"brokerAddrs key {key!r}: not a broker id") from None
                if not isinstance(value, str):
                    raise BodyError(f"brokerAddrs[{key}]: not an address string")
                addrs[broker_id] = value
            brokers.append(
                BrokerData(
                    cluster=get_str(b, "cluster", "") or "",
                    broker_name=name,
                    broker_addrs=addrs,
                    enable_acting_master=get_bool(b, "enableActingMaster"),
                )
            )
        return cls(tuple(queues), tuple(brokers), get_str(obj, "orderTopicConf"))


def _j(value: Any, ascii_only: bool) -> str:
    return json.dumps(value, ensure_ascii=ascii_only, separators=(",", ":"))
