"""The ACL signature: which fields, in what order, the body, HMAC-SHA1 in base64."""

from __future__ import annotations

import base64
import hashlib
import hmac

from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.remoting import signature as sig


def by_hand(content: bytes, secret: str) -> str:
    return base64.b64encode(hmac.new(secret.encode(), content, hashlib.sha1).digest()).decode()


def test_ali_ons_request_signature():
    # ali-ons signs AccessKey, OnsChannel and its header fields, values only, names
    # sorted (upper case before lower case), then the body.
    fields = {
        "topic": "orders",
        "queueId": "1",
        "AccessKey": "ak",
        "OnsChannel": "ALIYUN",
    }
    content = b"ak" + b"ALIYUN" + b"1" + b"orders" + b"payload"
    assert sig.signed_content(fields, b"payload") == content
    sent = {**fields, "Signature": by_hand(content, "sk")}
    assert sig.verify(sent, b"payload", "sk")
    assert not sig.verify(sent, b"payloaD", "sk")
    assert not sig.verify(sent, b"payload", "other")
    assert not sig.verify({**sent, "queueId": "2"}, b"payload", "sk")
    assert not sig.verify(fields, b"payload", "sk")  # no Signature at all


def test_java_sign_adds_access_key_and_token():
    fields = sig.sign({"b": "topic", "a": "group"}, b"", "ak", "sk", security_token="tok")
    assert fields["AccessKey"] == "ak" and fields["SecurityToken"] == "tok"
    # AccessKey < SecurityToken < a < b; no body.
    assert fields["Signature"] == by_hand(b"aktokgrouptopic", "sk")
    assert sig.verify(fields, b"", "sk")


def test_unique_key_query_left_out_for_old_versions_only():
    fields = sig.sign({"topic": "t", "key": "K"}, b"", "ak", "sk")
    late = {**fields, "_UNIQUE_KEY_QUERY": "true"}  # added after signing by old clients
    # MQVersion.Version.V4_9_3.ordinal() is 399 (V4_9_4_SNAPSHOT is 400).
    assert sig.verify(late, b"", "sk", version=399)
    assert not sig.verify(late, b"", "sk", version=400)


def test_sort_is_java_utf16_order():
    # Java sorts U+1F600 (UTF-16 0xD83D 0xDE00) before U+FF21; by code point it would
    # come after.
    fields = {"\U0001f600": "x", "\uff21": "y"}
    assert sig.signed_content(fields) == b"xy"


@settings(deadline=None)
@given(
    st.dictionaries(st.text(max_size=6), st.text(max_size=6), max_size=6),
    st.binary(max_size=20),
    st.text(min_size=1, max_size=10),
)
def test_sign_then_verify(fields, body, secret):
    signed = sig.sign(fields, body, "ak", secret)
    assert sig.verify(signed, body, secret)
