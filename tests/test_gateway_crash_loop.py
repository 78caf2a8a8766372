"""Crash loop of the whole gateway: a ``cli.serve`` subprocess under mixed MQTT QoS 1,
MQTT QoS 2 and AMQP confirmed load is killed with SIGKILL at random moments and
restarted on the same data directory, eight times; publishers reconnect and resend what
was not acknowledged (QoS 2 with DUP and the same packet id, PUBREL for PUBREC'd
flows), a persistent QoS 2 MQTT subscriber and an AMQP consumer reconnect after every
kill. Then:

- every acknowledged message (PUBACK, PUBREC, confirm) reached its consumers, including
  the copy of every MQTT message routed through ``amq.topic`` to the AMQP queue;
- a QoS 2 message is stored once (the gateway recognises resent PUBLISHes across kills);
- no LMQ's max offset moved backwards (read-only snapshots while the gateway is down);
- AMQP messages delivered again carry ``redelivered``; the session was present at every
  reconnect;
- a QoS 2 message is delivered exactly once to the QoS 2 subscriber (a "method B"
  receiver: no duplicate, no resend under another packet id, no id reused while held).

The loop runs once per module (about 30-60 s); each test checks one promise of it. The
harness is ``bench/gateway_crash_loop.py`` (run it for 20+ kills).
"""

from __future__ import annotations

import importlib

import pytest

KILLS = 8

pytestmark = pytest.mark.slow


def _harness():  # type: ignore[no-untyped-def]
    return importlib.import_module("bench.gateway_crash_loop")


@pytest.fixture(scope="module")
def figures(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    harness = _harness()
    data_dir = tmp_path_factory.mktemp("gateway-crash-loop") / "data"
    fig = harness.gateway_crash_loop(data_dir, kills=KILLS, seed=7, min_s=1.0, max_s=3.0)
    print(fig.summary())
    return fig


def test_every_acknowledged_message_is_delivered(figures) -> None:  # type: ignore[no-untyped-def]
    assert figures.kills == KILLS and len(figures.restart_s) == KILLS
    # load did run between the kills, of every kind
    assert figures.acked_q1 > 200 and figures.acked_q2 > 200 and figures.acked_amqp > 50
    assert figures.problems == []
    assert figures.lost_mqtt_q1 == 0, "PUBACKed QoS 1 messages never reached the subscriber"
    assert figures.lost_mqtt_q2 == 0, "PUBRECed QoS 2 messages never reached the subscriber"
    assert figures.lost_amqp == 0, "confirmed AMQP messages never reached the consumer"
    assert figures.lost_cross == 0, "acknowledged MQTT messages missing from the AMQP queue"


def test_a_qos2_message_is_stored_once(figures) -> None:  # type: ignore[no-untyped-def]
    assert figures.q2_stored >= figures.acked_q2
    assert figures.q2_stored_twice == 0


def test_no_lmq_offset_moves_backwards(figures) -> None:  # type: ignore[no-untyped-def]
    assert figures.lmqs >= 2  # the subscriber's filter and the AMQP queue
    assert figures.offset_regressions == 0


def test_sessions_and_redeliveries_survive_the_kills(figures) -> None:  # type: ignore[no-untyped-def]
    assert figures.session_missing == 0
    assert figures.amqp_unflagged_again == 0, "an AMQP message came again without redelivered"


def test_qos2_delivered_exactly_once(figures) -> None:  # type: ignore[no-untyped-def]
    # the subscriber is a "method B" QoS 2 receiver (MQTT 3.1.1 4.3.3): it delivers at
    # the first PUBLISH of a packet id and holds the id until the PUBREL
    assert figures.q2_duplicates == 0, "QoS 2 messages delivered twice"
    assert figures.new_pid_resends == 0, "QoS 2 messages resent under another packet id"
    assert figures.pid_reuse == 0, "a QoS 2 packet id still held was reused for another message"
    assert figures.q2_dropped_by_receiver == 0
