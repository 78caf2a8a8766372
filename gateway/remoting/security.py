"""Remoting authentication and authorisation (being written)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway.remoting.replies import error
from protocol.remoting.codes import ResponseCode

if TYPE_CHECKING:
    from gateway.remoting.frontend import RemotingFrontEnd
    from gateway.remoting.handler import RemotingHandler
    from protocol.remoting import RemotingCommand


def authorize(
    front: RemotingFrontEnd, handler: RemotingHandler, cmd: RemotingCommand
) -> RemotingCommand | None:
    auth = front.ctx.authenticator
    if auth is None or auth.allow_anonymous:
        return None
    return error(ResponseCode.NO_PERMISSION, "access keys are not supported yet")
