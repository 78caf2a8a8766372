"""Client-certificate subjects as RFC 4514 strings, e.g. ``CN=device-17,O=Acme,C=DE``.

A users file maps exact subjects to users. Both sides go through
:func:`normalize_subject` (RDNs split at unescaped commas, whitespace around separators
dropped, known attribute names in their short upper-case form), so ``cn=device-17, O=Acme``
and ``CN=device-17,O=Acme`` are the same subject. Attribute values are compared exactly.

:func:`subject_from_peercert` turns the dict of ``ssl.SSLSocket.getpeercert()`` into that
form, most specific RDN first as ``openssl x509 -subject -nameopt RFC2253`` prints it.
"""

from __future__ import annotations

from collections.abc import Mapping

_SHORT_NAMES = {
    "commonname": "CN",
    "cn": "CN",
    "organizationname": "O",
    "o": "O",
    "organizationalunitname": "OU",
    "ou": "OU",
    "countryname": "C",
    "c": "C",
    "localityname": "L",
    "l": "L",
    "stateorprovincename": "ST",
    "st": "ST",
    "streetaddress": "STREET",
    "street": "STREET",
    "domaincomponent": "DC",
    "dc": "DC",
    "userid": "UID",
    "uid": "UID",
    "emailaddress": "emailAddress",
    "serialnumber": "serialNumber",
}
_SPECIAL = ',+"\\<>;='


def _attribute_name(name: str) -> str:
    name = name.strip()
    return _SHORT_NAMES.get(name.lower(), name)


def _split_unescaped(text: str, sep: str) -> list[str]:
    parts, current, escaped = [], [], False
    for ch in text:
        if escaped:
            current.append(ch)
            escaped = False
        elif ch == "\\":
            current.append(ch)
            escaped = True
        elif ch == sep:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return parts


def _strip_value(value: str) -> str:
    value = value.lstrip()
    while value.endswith(" ") and not value.endswith("\\ "):
        value = value[:-1]
    return value


def normalize_subject(subject: str) -> str:
    """The canonical form of an RFC 4514 subject; ValueError if it is not one."""
    if not isinstance(subject, str) or not subject.strip():
        raise ValueError("certificate subject must be a non-empty string like 'CN=device-1,O=Acme'")
    rdns = []
    for rdn in _split_unescaped(subject.strip(), ","):
        attributes = []
        for attribute in _split_unescaped(rdn, "+"):
            name, sep, value = attribute.partition("=")
            if not sep or not name.strip() or not value.strip():
                raise ValueError(
                    f"certificate subject {subject!r}: {attribute.strip()!r} is not NAME=VALUE"
                )
            attributes.append(f"{_attribute_name(name)}={_strip_value(value)}")
        rdns.append("+".join(attributes))
    return ",".join(rdns)


def _escape(value: str) -> str:
    out = "".join("\\" + ch if ch in _SPECIAL else ch for ch in value)
    if out.startswith(("#", " ")):
        out = "\\" + out
    if out.endswith(" ") and not out.endswith("\\ "):
        out = out[:-1] + "\\ "
    return out


def subject_from_peercert(cert: Mapping[str, object]) -> str:
    """The RFC 4514 subject of a certificate dict from ``SSLSocket.getpeercert()``."""
    subject = cert.get("subject")
    if not isinstance(subject, tuple | list) or not subject:
        raise ValueError("certificate has no subject")
    rdns = []
    for rdn in reversed(subject):
        rdns.append(
            "+".join(f"{_attribute_name(str(name))}={_escape(str(value))}" for name, value in rdn)
        )
    return normalize_subject(",".join(rdns))
