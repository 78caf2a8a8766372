"""The message properties string of the Aliyun MQ HTTP API: ``k1:v1|k2:v2|``.

The Python SDK writes a trailing ``|``, the Node SDK none; both split on ``|`` then
``:`` and drop an entry that is not exactly one non-empty name and one non-empty value.
Both SDKs refuse names and values with any of ``: | " & ' < >``
(:data:`FORBIDDEN_CHARS`); a server answering a property that holds one would have the
SDKs silently drop it, so :func:`encode_properties` leaves such entries out.

Special names: ``KEYS`` (the message keys), ``__STARTDELIVERTIME`` (deliver at, epoch
ms), ``__TransCheckT`` (transactional: seconds before the first check),
``__SHARDINGKEY`` (ordered: the partition key).
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = [
    "FORBIDDEN_CHARS",
    "KEYS",
    "SHARDING_KEY",
    "START_DELIVER_TIME",
    "TRANS_CHECK_TIME",
    "PropertyError",
    "decode_properties",
    "encode_properties",
]

FORBIDDEN_CHARS = frozenset(':|"&\'<>')
KEYS = "KEYS"
START_DELIVER_TIME = "__STARTDELIVERTIME"
TRANS_CHECK_TIME = "__TransCheckT"
SHARDING_KEY = "__SHARDINGKEY"


class PropertyError(ValueError):
    """A properties string the SDKs cannot have sent."""


def decode_properties(text: str, *, strict: bool = False) -> dict[str, str]:
    """The properties of ``text``. Lenient like the SDKs (malformed entries are
    skipped); ``strict``: raise :class:`PropertyError` for an entry with no ``:``, more
    than one, or an empty side."""
    out: dict[str, str] = {}
    for entry in text.split("|"):
        if not entry:
            continue
        parts = entry.split(":")
        if len(parts) != 2 or not parts[0] or not parts[1]:
            if strict:
                raise PropertyError(f"malformed property {entry!r} (want name:value)")
            continue
        out[parts[0]] = parts[1]
    return out


def _clean(text: str) -> bool:
    return bool(text) and FORBIDDEN_CHARS.isdisjoint(text)


def encode_properties(props: Iterable[tuple[str, str]]) -> str:
    """``k:v|`` for each pair whose name and value the SDKs accept (others left out)."""
    return "".join(f"{k}:{v}|" for k, v in props if _clean(k) and _clean(v))
