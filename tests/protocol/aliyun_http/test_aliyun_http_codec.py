"""protocol.aliyun_http against the SDKs' own code: signatures computed by each SDK's
signing function (Python's ``MQClient.get_signature``, Node's ``MQClient.sign`` run by
node), bodies each SDK encodes parsed here, bodies rendered here parsed by each SDK's
decoder, and the receipt handles' refusal of anything not signed by the key."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from mq_http_sdk.mq_client import MQClient
from mq_http_sdk.mq_exception import MQServerException
from mq_http_sdk.mq_request import PublishMessageRequest
from mq_http_sdk.mq_tool import MQUtils
from mq_http_sdk.mq_xml_handler import (
    AckMessageDecoder,
    ConsumeMessageDecoder,
    ErrorDecoder,
    PublishMessageDecoder,
    ReceiptHandlesEncoder,
    TopicMessageEncoder,
)

from protocol.aliyun_http import (
    AckError,
    ConsumedMessage,
    Handle,
    HandleCodec,
    HandleKind,
    InvalidHandle,
    PropertyError,
    XmlError,
    body_md5,
    decode_properties,
    encode_properties,
    parse_authorization,
    parse_publish,
    parse_receipt_handles,
    render_ack_errors,
    render_error,
    render_messages,
    render_published,
    sign,
    verify,
)
from protocol.aliyun_http.signature import content_md5_matches

NODE_DIR = Path(__file__).resolve().parents[2] / "node"
DATE = "Tue, 24 Nov 2026 18:00:00 GMT"

# -- signatures ---------------------------------------------------------------------


@pytest.mark.parametrize(("method", "resource", "body"), [
    ("GET", "/topics/T1/messages?consumer=GID&numOfMessages=3&ns=INST&waitseconds=5&tag=a||b",
     ""),
    ("POST", "/topics/T1/messages?ns=INST", "<Message/>"),
    ("DELETE", "/topics/T1/messages?consumer=GID&trans=commit", "<ReceiptHandles/>"),
])
def test_python_sdk_signature(method: str, resource: str, body: str) -> None:
    client = MQClient("http://127.0.0.1:1", "AK1", "SK-secret")
    headers = {"x-mq-version": "2015-06-06", "date": DATE, "host": "127.0.0.1:1"}
    if body:
        headers["content-type"] = "text/xml;charset=UTF-8"
    expected = client.get_signature(method, headers, resource)
    ours = "MQ AK1:" + sign("SK-secret", method, list(headers.items()), resource)
    assert ours == expected
    auth = parse_authorization(expected)
    assert auth.access_key == "AK1"
    assert verify(auth, "SK-secret", method, list(headers.items()), resource)
    assert not verify(auth, "other", method, list(headers.items()), resource)
    assert not verify(auth, "SK-secret", method, list(headers.items()), resource + "&x=1")


NODE_SIGN = """
const { MQClient } = require('@aliyunmq/mq-http-sdk');
const [method, resource, body] = JSON.parse(process.argv[1]);
const c = new MQClient('http://127.0.0.1:1', 'AK2', 'node-secret');
const h = c.buildHeaders(method, Buffer.from(body), resource);
process.stdout.write(JSON.stringify(h));
"""


@pytest.mark.parametrize(("method", "resource", "body"), [
    ("GET", "/topics/T1/messages?consumer=GID&ns=INST&tag=a%7C%7Cb&numOfMessages=3"
     "&waitseconds=5", ""),
    ("POST", "/topics/T1/messages?ns=INST", "<Message><MessageBody><![CDATA[x]]>"
     "</MessageBody></Message>"),
    ("DELETE", "/topics/T1/messages?consumer=GID&ns=INST&trans=rollback",
     "<ReceiptHandles/>"),
])
def test_node_sdk_signature(method: str, resource: str, body: str) -> None:
    done = subprocess.run(["node", "-e", NODE_SIGN, json.dumps([method, resource, body])],
                          capture_output=True, text=True, timeout=30, cwd=NODE_DIR)
    assert done.returncode == 0, done.stderr
    headers = json.loads(done.stdout)
    pairs = [(k, str(v)) for k, v in headers.items()]
    auth = parse_authorization(headers["authorization"])
    assert auth.access_key == "AK2"
    assert verify(auth, "node-secret", method, pairs, resource)
    assert not verify(auth, "wrong", method, pairs, resource)
    if method != "GET":  # Node signs a Content-MD5: base64 of the hex digest
        assert content_md5_matches(headers["content-md5"], body.encode())
        assert not content_md5_matches(headers["content-md5"], body.encode() + b" ")


def test_bad_authorization_headers() -> None:
    for bad in ("", "MQ", "MQ nocolon", "Basic a:b", "MQ :sig", "MQ ak:"):
        with pytest.raises(ValueError):
            parse_authorization(bad)


# -- bodies -----------------------------------------------------------------------------

# XML 1.0 text (the SDK writes a control character as is: not XML, refused as such)
text = st.text(st.characters(blacklist_categories=("Cs", "Cc")),
               min_size=1, max_size=40).filter(lambda s: s.strip() == s and s.strip())
prop_text = st.text(st.characters(whitelist_categories=("L", "N"), max_codepoint=0x2FFF),
                    min_size=1, max_size=12)


@given(body=text, tag=st.text(st.characters(whitelist_categories=("L", "N")), max_size=20),
       props=st.dictionaries(prop_text, prop_text, max_size=5))
def test_python_sdk_publish_body_parses(body: str, tag: str, props: dict[str, str]) -> None:
    req = PublishMessageRequest("", "T", body, tag, MQUtils.map_to_string(props))
    parsed = parse_publish(TopicMessageEncoder.encode(req))
    assert parsed.body == body and parsed.tag == tag
    assert decode_properties(parsed.properties, strict=True) == props


def test_node_style_cdata_body_parses() -> None:
    data = (b'<?xml version="1.0" encoding="UTF-8"?><Message xmlns="http://mq.aliyuncs.com/'
            b'doc/v1/"><MessageBody><![CDATA[a <b> & c]]></MessageBody><MessageTag>'
            b'<![CDATA[t]]></MessageTag><Properties><![CDATA[k:v|KEYS:x]]></Properties>'
            b'</Message>')
    parsed = parse_publish(data)
    assert (parsed.body, parsed.tag) == ("a <b> & c", "t")
    assert decode_properties(parsed.properties) == {"k": "v", "KEYS": "x"}


@given(st.lists(st.text(st.characters(whitelist_categories=("L", "N")), min_size=1,
                        max_size=60), min_size=1, max_size=16))
def test_receipt_handles_round_trip(handles: list[str]) -> None:
    assert parse_receipt_handles(ReceiptHandlesEncoder.encode(handles)) == handles


@pytest.mark.parametrize("data", [
    b"", b"not xml", b"<Other/>", b"<Message><MessageBody></MessageBody></Message>",
    b'<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaa">]><Message><MessageBody>&a;'
    b"</MessageBody></Message>",
    b'<!DOCTYPE x SYSTEM "file:///etc/passwd"><Message/>',
])
def test_malformed_publish_bodies(data: bytes) -> None:
    with pytest.raises(XmlError):
        parse_publish(data)


def test_receipt_handle_limits() -> None:
    with pytest.raises(XmlError):
        parse_receipt_handles(ReceiptHandlesEncoder.encode([]))
    with pytest.raises(XmlError):
        parse_receipt_handles(ReceiptHandlesEncoder.encode([f"h{i}" for i in range(17)]))


@given(body=text, tag=st.text(st.characters(whitelist_categories=("L", "N")), max_size=10),
       props=st.dictionaries(prop_text, prop_text, max_size=4), times=st.integers(1, 99))
def test_rendered_messages_parse_in_the_python_sdk(body: str, tag: str, props: dict[str, str],
                                                    times: int) -> None:
    m = ConsumedMessage("ID1", "h.x", body, 1, 2, 3, times, tag, encode_properties(
        props.items()))
    [decoded] = ConsumeMessageDecoder.decode(render_messages([m]))
    assert decoded.message_body == body
    assert decoded.consumed_times == times and decoded.next_consume_time == 3
    assert decoded.message_body_md5 == body_md5(body)
    assert MQUtils.string_to_map(decoded.properties) == props
    assert (decoded.message_tag or "") == tag


def test_control_characters_are_replaced() -> None:
    m = ConsumedMessage("ID", "h", "a\x01b\x00", 1, 2, 3, 1, "", "")
    [decoded] = ConsumeMessageDecoder.decode(render_messages([m]))
    assert decoded.message_body == "a\ufffdb\ufffd"


def test_published_errors_and_ack_errors_parse_in_the_python_sdk() -> None:
    assert PublishMessageDecoder.decode(render_published("ID", "MD5")) == ("ID", "MD5", "")
    assert PublishMessageDecoder.decode(render_published("ID", "MD5", "H")) == (
        "ID", "MD5", "H")
    assert ErrorDecoder.decodeError(render_error("MessageNotExist", "none", "R1", "h")) == (
        "MessageNotExist", "none", "R1", "h", None)
    code, message, _, _, subs = AckMessageDecoder.decodeError(render_ack_errors(
        [AckError("ReceiptHandleError", "bad", "h1"), AckError("MessageNotExist", "gone",
                                                                "h2")]))
    assert (code, message) == ("ReceiptHandleError", "bad")
    assert [s["ReceiptHandle"] for s in subs] == ["h1", "h2"]
    assert issubclass(MQServerException, Exception)


# -- properties ------------------------------------------------------------------------


def test_properties_forbidden_characters_left_out() -> None:
    assert encode_properties([("a", "1"), ("b:c", "2"), ("d", "x|y"), ("e", "<")]) == "a:1|"
    assert decode_properties("a:1|bad|c:|:d|e:2") == {"a": "1", "e": "2"}
    with pytest.raises(PropertyError):
        decode_properties("a:1|bad", strict=True)


# -- receipt handles ---------------------------------------------------------------------

names = st.text(st.characters(whitelist_categories=("L", "N"), whitelist_characters="%|_-"),
                min_size=1, max_size=40)
handles = st.builds(Handle, st.sampled_from(HandleKind), names, names,
                    st.integers(0, 1023), st.integers(0, 2**62), st.integers(0, 2**45))


@given(handles)
def test_handles_round_trip(handle: Handle) -> None:
    codec = HandleCodec(b"k" * 32)
    text = codec.encode(handle)
    assert codec.decode(text) == handle
    assert set(text) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.")


@given(handles, st.data())
def test_altered_or_foreign_handles_are_refused(handle: Handle, data: st.DataObject) -> None:
    codec = HandleCodec(b"k" * 32)
    text = codec.encode(handle)
    i = data.draw(st.integers(0, len(text) - 1))
    replacement = data.draw(st.sampled_from("Aa0-_.").filter(lambda c: c != text[i]))
    altered = text[:i] + replacement + text[i + 1:]
    with pytest.raises(InvalidHandle):
        codec.decode(altered)
    with pytest.raises(InvalidHandle):
        HandleCodec(b"o" * 32).decode(text)


# -- arbitrary input: only the documented errors ---------------------------------------


@given(st.one_of(st.binary(max_size=200), st.text(max_size=200).map(str.encode),
                 st.builds(lambda body: b"<Message><MessageBody>" + body
                           + b"</MessageBody></Message>", st.binary(max_size=50))))
def test_arbitrary_bodies_raise_only_xml_errors(data: bytes) -> None:
    for parse in (parse_publish, parse_receipt_handles):
        try:
            parse(data)
        except XmlError:
            pass


@given(st.dictionaries(st.sampled_from(["topic", "content", "bizSeqNo", "uniqueId", "ttl",
                                        "messageType", "extfields", "tag", "contents",
                                        "size"]),
                       st.one_of(st.text(max_size=30), st.sampled_from(
                           ["[]", "[{}]", '[{"topic":"t","msg":"m","ttl":"x"}]', "{}",
                            '{"a":[1]}', "2", "-1"]))))
def test_rip17_forms_raise_only_protocol_errors(form: dict[str, str]) -> None:
    from protocol.rip17 import ProtocolError, parse_batch, parse_send

    for parse in (parse_send, parse_batch):
        try:
            parse(form)
        except ProtocolError:
            pass
