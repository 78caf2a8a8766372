"""Endpoint kinds by name: the runner builds a rule's source and target from here.

Each kind is a module of ``gateway.connector`` with two functions::

    def make_source(cluster: Cluster, rule: Rule) -> Source: ...
    def make_target(cluster: Cluster, rule: Rule) -> Target: ...

``cluster`` is the rules file's :class:`~gateway.connector.rules.Cluster` (endpoints,
credentials, TLS, ``options`` with the kind's own keys, ``KIND_CLUSTER_KEYS``), ``rule``
the :class:`~gateway.connector.rules.Rule` (``rule.read`` is the topic / MQTT filter /
AMQP queue a source reads; a target gets its topic per write). The functions only
build: connecting is ``open()``. Modules are imported when a rule uses their kind, so a
missing optional client library only matters to the rules that need it.
"""

from __future__ import annotations

import importlib
from typing import Any, cast

from .endpoints import Source, Target
from .rules import Cluster, Rule

MODULES = {
    "gateway": "gateway.connector.gateway",
    "rocketmq": "gateway.connector.gateway",
    "mqtt": "gateway.connector.mqtt",
    "amqp": "gateway.connector.amqp",
}


class UnsupportedKind(Exception):
    """No endpoint module for a kind (not built, or its client library is missing)."""


def _module(kind: str) -> Any:
    name = MODULES.get(kind)
    if name is None:
        raise UnsupportedKind(f"no endpoint kind {kind!r}")
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        raise UnsupportedKind(f"endpoint kind {kind!r} is not available: {exc}") from None


def make_source(cluster: Cluster, rule: Rule) -> Source:
    factory = getattr(_module(cluster.kind), "make_source", None)
    if factory is None:
        raise UnsupportedKind(f"endpoint kind {cluster.kind!r} cannot be a source")
    return cast(Source, factory(cluster, rule))


def make_target(cluster: Cluster, rule: Rule) -> Target:
    factory = getattr(_module(cluster.kind), "make_target", None)
    if factory is None:
        raise UnsupportedKind(f"endpoint kind {cluster.kind!r} cannot be a target")
    return cast(Target, factory(cluster, rule))
