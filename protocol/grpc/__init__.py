"""RocketMQ 5's gRPC protocol (``apache.rocketmq.v2``), sans-IO helpers.

The message classes are the generated ones the official Python client ships
(PyPI ``rocketmq-python-client``: ``rocketmq.grpc_protocol.definition_pb2`` and
``service_pb2``); this package never imports the ``*_pb2_grpc`` service modules nor
grpc itself. Here: status codes and messages (:mod:`.status`); the gRPC server side of
an HTTP/2 connection, sans-IO (:mod:`.server`, over PyPI ``ngh2``) and gRPC's message
framing (:mod:`.framing`).
"""

from .status import Code, StatusError, ok, status

__all__ = ["Code", "StatusError", "ok", "status"]
