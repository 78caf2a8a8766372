"""The access-key signature real clients put in ``extFields`` (ACL 1.0).

What a client does (Java ``AclClientRPCHook``, ali-ons ``Channel.beforeRequest``; the
two agree):

1. add ``AccessKey`` (and ``SecurityToken`` if it has one; ali-ons adds ``OnsChannel``)
   to the fields it will send;
2. take every field but ``Signature``, sorted by name as Java's ``TreeMap`` sorts
   strings (UTF-16 code units; for the ASCII names in use, plain byte order), and
   concatenate their *values* only, no names, no separators;
3. append the body's bytes, if there is a body;
4. HMAC-SHA1 with the secret key, base64: that is ``Signature``.

A broker (``DefaultAuthenticationContextBuilder``) recomputes the same over the fields it
received, except that for a request ``version`` up to V4_9_3 it also leaves out
``_UNIQUE_KEY_QUERY``, which old clients added after signing.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

ACCESS_KEY = "AccessKey"
SIGNATURE = "Signature"
SECURITY_TOKEN = "SecurityToken"
ONS_CHANNEL = "OnsChannel"
UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"
#: ``MQVersion.Version.V4_9_3.ordinal()``.
V4_9_3 = 399


def _java_order(name: str) -> bytes:
    # String.compareTo compares UTF-16 code units; UTF-16-BE bytes sort the same way.
    return name.encode("utf-16-be", "surrogatepass")


def signed_content(
    ext_fields: dict[str, str], body: bytes = b"", *, version: int | None = None
) -> bytes:
    """The bytes the signature covers (``AclUtils.combineRequestContent``)."""
    names = [n for n in ext_fields if n != SIGNATURE]
    if version is not None and version <= V4_9_3:
        names = [n for n in names if n != UNIQUE_KEY_QUERY]
    names.sort(key=_java_order)
    text = "".join(ext_fields[n] for n in names).encode("utf-8", "surrogatepass")
    return text + body


def signature(content: bytes, secret_key: str) -> str:
    digest = hmac.new(secret_key.encode(), content, hashlib.sha1).digest()
    return base64.b64encode(digest).decode()


def sign(
    ext_fields: dict[str, str],
    body: bytes,
    access_key: str,
    secret_key: str,
    *,
    security_token: str | None = None,
) -> dict[str, str]:
    """``ext_fields`` with ``AccessKey`` (and ``SecurityToken``) added and signed, as the
    Java client sends them."""
    fields = dict(ext_fields)
    fields[ACCESS_KEY] = access_key
    if security_token is not None:
        fields[SECURITY_TOKEN] = security_token
    fields[SIGNATURE] = signature(signed_content(fields, body), secret_key)
    return fields


def verify(
    ext_fields: dict[str, str], body: bytes, secret_key: str, *, version: int | None = None
) -> bool:
    """Whether ``Signature`` matches; compares in constant time."""
    given = ext_fields.get(SIGNATURE)
    if given is None:
        return False
    expected = signature(signed_content(ext_fields, body, version=version), secret_key)
    return hmac.compare_digest(expected.encode(), given.encode("utf-8", "surrogatepass"))
