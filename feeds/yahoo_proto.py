"""Hand-written decoder of the Yahoo streamer ``PricingData`` protobuf (proto3), no dependency.

Only the wire types that proto3 uses are accepted: varint (0), fixed64 (1), length-delimited (2)
and fixed32 (5). Unknown fields are skipped; a truncated or malformed message raises
:class:`ProtoDecodeError`. Floats are float32 on the wire: :func:`clean_float32` turns them back
into the short decimal the exchange printed (``24.535`` rather than ``24.534999847...``).
"""

from __future__ import annotations

import base64
import binascii
import struct

import msgspec

__all__ = [
    "PricingData",
    "ProtoDecodeError",
    "clean_float32",
    "decode_pricing",
    "decode_pricing_b64",
    "encode_pricing",
]

_F32 = struct.Struct("<f")
_MASK64 = (1 << 64) - 1


class ProtoDecodeError(ValueError):
    """The bytes are not a well-formed PricingData message."""


class PricingData(msgspec.Struct, kw_only=True):
    """One decoded Yahoo streamer snapshot (fields absent on the wire keep proto3 defaults)."""

    id: str = ""
    price: float = 0.0
    time: int = 0
    currency: str = ""
    exchange: str = ""
    quote_type: int = 0
    market_hours: int = 0
    change_percent: float = 0.0
    day_volume: int = 0
    day_high: float = 0.0
    day_low: float = 0.0
    change: float = 0.0
    short_name: str = ""
    expire_date: int = 0
    open_price: float = 0.0
    previous_close: float = 0.0
    strike_price: float = 0.0
    underlying_symbol: str = ""
    open_interest: int = 0
    options_type: int = 0
    mini_option: int = 0
    last_size: int = 0
    bid: float = 0.0
    bid_size: int = 0
    ask: float = 0.0
    ask_size: int = 0
    price_hint: int = 0


# Field number -> (attribute, kind). Kinds: "s" string, "f" float32, "z" sint64, "i" int32/int64.
_FIELDS: dict[int, tuple[str, str]] = {
    1: ("id", "s"),
    2: ("price", "f"),
    3: ("time", "z"),
    4: ("currency", "s"),
    5: ("exchange", "s"),
    6: ("quote_type", "i"),
    7: ("market_hours", "i"),
    8: ("change_percent", "f"),
    9: ("day_volume", "z"),
    10: ("day_high", "f"),
    11: ("day_low", "f"),
    12: ("change", "f"),
    13: ("short_name", "s"),
    14: ("expire_date", "z"),
    15: ("open_price", "f"),
    16: ("previous_close", "f"),
    17: ("strike_price", "f"),
    18: ("underlying_symbol", "s"),
    19: ("open_interest", "z"),
    20: ("options_type", "z"),
    21: ("mini_option", "z"),
    22: ("last_size", "z"),
    23: ("bid", "f"),
    24: ("bid_size", "z"),
    25: ("ask", "f"),
    26: ("ask_size", "z"),
    27: ("price_hint", "z"),
}
_WIRE_OF_KIND = {"s": 2, "f": 5, "z": 0, "i": 0}


def clean_float32(x: float) -> float:
    """Return the shortest decimal (7 to 9 significant digits) that is the same float32 as ``x``."""
    if x == 0.0 or x != x or x in (float("inf"), float("-inf")):
        return x
    packed = _F32.pack(x)
    for digits in (7, 8, 9):
        y = float(f"{x:.{digits}g}")
        if _F32.pack(y) == packed:
            return y
    return x


def _varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        if pos >= end:
            raise ProtoDecodeError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result & _MASK64, pos
        shift += 7
        if shift >= 70:
            raise ProtoDecodeError("varint too long")


def decode_pricing(buf: bytes) -> PricingData:
    """Decode one serialized PricingData message; raise :class:`ProtoDecodeError` if malformed."""
    values: dict[str, object] = {}
    pos = 0
    end = len(buf)
    fields = _FIELDS
    wire_of = _WIRE_OF_KIND
    f32 = _F32.unpack_from
    while pos < end:
        key = buf[pos]
        if key < 0x80:  # one-byte key: fields 1-15
            pos += 1
        else:
            key, pos = _varint(buf, pos, end)
        field_no = key >> 3
        wire = key & 7
        if field_no == 0:
            raise ProtoDecodeError("field number 0")
        spec = fields.get(field_no)
        if wire == 0:
            if pos < end and buf[pos] < 0x80:
                raw = buf[pos]
                pos += 1
            else:
                raw, pos = _varint(buf, pos, end)
            if spec is None or wire_of[spec[1]] != 0:
                continue
            name, kind = spec
            if kind == "z":
                values[name] = (raw >> 1) ^ -(raw & 1)
            else:
                values[name] = raw - (1 << 64) if raw >= 1 << 63 else raw
        elif wire == 5:
            if pos + 4 > end:
                raise ProtoDecodeError("truncated fixed32")
            if spec is not None and spec[1] == "f":
                values[spec[0]] = f32(buf, pos)[0]
            pos += 4
        elif wire == 2:
            length, pos = _varint(buf, pos, end)
            stop = pos + length
            if stop > end:
                raise ProtoDecodeError("truncated length-delimited field")
            if spec is not None and spec[1] == "s":
                try:
                    values[spec[0]] = buf[pos:stop].decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise ProtoDecodeError(f"field {spec[0]} is not UTF-8") from exc
            pos = stop
        elif wire == 1:
            if pos + 8 > end:
                raise ProtoDecodeError("truncated fixed64")
            pos += 8
        else:
            raise ProtoDecodeError(f"unsupported wire type {wire}")
    return PricingData(**values)  # type: ignore[arg-type]


def decode_pricing_b64(message: str | bytes) -> PricingData:
    """Decode a base64 PricingData message as carried in a ``pricing`` frame."""
    try:
        raw = base64.b64decode(message, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ProtoDecodeError(f"invalid base64: {exc}") from exc
    return decode_pricing(raw)


def _enc_varint(n: int) -> bytes:
    n &= _MASK64
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def encode_pricing(data: PricingData) -> bytes:
    """Serialize ``data`` (non-default fields only, proto3 style); used by fakes and benchmarks."""
    out = bytearray()
    for field_no, (name, kind) in _FIELDS.items():
        value = getattr(data, name)
        if not value:
            continue
        wire = _WIRE_OF_KIND[kind]
        out += _enc_varint((field_no << 3) | wire)
        if kind == "s":
            raw = value.encode("utf-8")
            out += _enc_varint(len(raw)) + raw
        elif kind == "f":
            out += _F32.pack(value)
        elif kind == "z":
            out += _enc_varint((value << 1) ^ (value >> 63))
        else:
            out += _enc_varint(value)
    return bytes(out)
