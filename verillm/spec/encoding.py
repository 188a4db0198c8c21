"""One canonical byte encoding for every protocol record.

Records are frozen dataclasses whose fields are annotated with a wire type (`U32`, `Bytes32`,
...). `encode` writes the fields in declaration order: fixed-width integers big-endian, floats
as IEEE-754 big-endian, variable-length data behind a u32 length. There is exactly one
encoding per value, so hashes over encodings are well defined and `decode(encode(x)) == x`.
The same layout is what the contracts decode (`contracts/src/Encoding.sol` mirrors the parts a
contract needs).
"""

import dataclasses
import functools
import struct
import typing
from typing import Annotated, Any, TypeVar

from verillm.errors import EncodingError


class Wire:
    """A wire type: how one field is written. `size` is None for variable-length types."""

    def __init__(self, name: str, size: int | None):
        self.name = name
        self.size = size

    def __repr__(self) -> str:
        return f"Wire({self.name})"


U8 = Annotated[int, Wire("u8", 1)]
U16 = Annotated[int, Wire("u16", 2)]
U32 = Annotated[int, Wire("u32", 4)]
U64 = Annotated[int, Wire("u64", 8)]
U256 = Annotated[int, Wire("u256", 32)]
F32 = Annotated[float, Wire("f32", 4)]
F64 = Annotated[float, Wire("f64", 8)]
Bytes20 = Annotated[bytes, Wire("bytes20", 20)]
Bytes32 = Annotated[bytes, Wire("bytes32", 32)]
Bytes65 = Annotated[bytes, Wire("bytes65", 65)]
VarBytes = Annotated[bytes, Wire("bytes", None)]
Text = Annotated[str, Wire("text", None)]
U32List = Annotated[tuple[int, ...], Wire("u32[]", None)]
U16List = Annotated[tuple[int, ...], Wire("u16[]", None)]
F32List = Annotated[tuple[float, ...], Wire("f32[]", None)]
Bytes32List = Annotated[tuple[bytes, ...], Wire("bytes32[]", None)]

_INT_FORMATS = {"u8": ">B", "u16": ">H", "u32": ">I", "u64": ">Q"}
_LIST_ITEM = {"u32[]": ("u32", 4), "u16[]": ("u16", 2), "f32[]": ("f32", 4), "bytes32[]": ("bytes32", 32)}

# Integer lists (token ids, layers) are packed and unpacked whole: one struct call per list.
_INT_LIST_FORMATS = {"u32[]": ("I", 4, 1 << 32), "u16[]": ("H", 2, 1 << 16)}

R = TypeVar("R")


@functools.cache  # records are frozen classes: their wires never change, and get_type_hints is slow
def _field_wires(cls: type) -> list[tuple[str, Any]]:
    hints = typing.get_type_hints(cls, include_extras=True)
    return [(f.name, _wire_of(hints[f.name])) for f in dataclasses.fields(cls)]


def _wire_of(hint: Any) -> Any:
    """Return the Wire of an annotated hint, the record class of a nested record, or a list."""
    if typing.get_origin(hint) is Annotated:
        return hint.__metadata__[0]
    if dataclasses.is_dataclass(hint):
        return hint
    if typing.get_origin(hint) is tuple and dataclasses.is_dataclass(typing.get_args(hint)[0]):
        return ("records", typing.get_args(hint)[0])
    raise TypeError(f"no wire type for {hint!r}")


def _encode_scalar(name: str, value: Any) -> bytes:
    if name in _INT_FORMATS:
        return struct.pack(_INT_FORMATS[name], value)
    if name == "u256":
        return value.to_bytes(32, "big")
    if name == "f32":
        return struct.pack(">f", value)
    if name == "f64":
        return struct.pack(">d", value)
    if name.startswith("bytes") and not name.endswith("[]"):
        return value
    raise TypeError(name)


def _check_scalar(field: str, wire: Wire, value: Any) -> None:
    if wire.name.startswith("u") and not wire.name.endswith("[]"):
        if not isinstance(value, int) or isinstance(value, bool):
            raise EncodingError(f"{field}: expected an integer, got {type(value).__name__}")
        if not 0 <= value < 1 << (8 * wire.size):
            raise EncodingError(f"{field}: {value} does not fit {wire.name}")
    elif wire.name.startswith("bytes") and wire.size is not None:
        if not isinstance(value, bytes) or len(value) != wire.size:
            raise EncodingError(f"{field}: expected {wire.size} bytes")


def _encode_value(field: str, wire: Any, value: Any) -> bytes:
    if isinstance(wire, tuple):
        items = b"".join(encode(item) for item in value)
        return struct.pack(">I", len(value)) + items
    if dataclasses.is_dataclass(wire):
        return encode(value)
    if wire.name in _INT_LIST_FORMATS and _is_int_list_in_range(wire.name, value):
        code, _, _ = _INT_LIST_FORMATS[wire.name]
        return struct.pack(f">I{len(value)}{code}", len(value), *value)
    if wire.name in _LIST_ITEM:
        item_name, _ = _LIST_ITEM[wire.name]
        for item in value:
            _check_scalar(field, Wire(item_name, _LIST_ITEM[wire.name][1]), item)
        return struct.pack(">I", len(value)) + b"".join(_encode_scalar(item_name, v) for v in value)
    if wire.name == "text":
        value = value.encode("utf-8")
    if wire.size is None:
        return struct.pack(">I", len(value)) + bytes(value)
    _check_scalar(field, wire, value)
    return _encode_scalar(wire.name, value)


def _is_int_list_in_range(wire_name: str, value: Any) -> bool:
    # Anything else takes the item-by-item path, which raises the precise error.
    _, _, limit = _INT_LIST_FORMATS[wire_name]
    if not all(type(v) is int for v in value):
        return False
    return not value or (min(value) >= 0 and max(value) < limit)


def _fixed_int_encoder(field: str, wire: Wire) -> Any:
    packer, limit = struct.Struct(_INT_FORMATS[wire.name]).pack, 1 << (8 * wire.size)

    def encode_int(value: Any) -> bytes:
        if type(value) is not int:  # bool and int subclasses take the checked path and its errors
            return _encode_value(field, wire, value)
        if not 0 <= value < limit:
            raise EncodingError(f"{field}: {value} does not fit {wire.name}")
        return packer(value)

    return encode_int


def _fixed_bytes_encoder(field: str, wire: Wire) -> Any:
    size = wire.size

    def encode_bytes(value: Any) -> bytes:
        if type(value) is not bytes or len(value) != size:
            return _encode_value(field, wire, value)  # raises the checked path's error (or accepts a subclass)
        return value

    return encode_bytes


@functools.cache  # per record class, one encoder per field: the type dispatch of `_encode_value`, done once
def _field_encoders(cls: type) -> list[tuple[str, Any]]:
    encoders = []
    for name, wire in _field_wires(cls):
        if isinstance(wire, tuple):
            encoder = functools.partial(_encode_value, name, wire)
        elif dataclasses.is_dataclass(wire):
            encoder = encode
        elif wire.name in _INT_FORMATS:
            encoder = _fixed_int_encoder(name, wire)
        elif wire.name.startswith("bytes") and wire.size is not None:
            encoder = _fixed_bytes_encoder(name, wire)
        else:
            encoder = functools.partial(_encode_value, name, wire)
        encoders.append((name, encoder))
    return encoders


def encode(record: Any) -> bytes:
    """Return the canonical encoding of a protocol record (the same bytes as `_encode_value` field by field)."""
    return b"".join([encoder(getattr(record, name)) for name, encoder in _field_encoders(type(record))])


class _Reader:
    def __init__(self, data: bytes):
        self.data = memoryview(data)
        self.offset = 0

    def take(self, n: int) -> bytes:
        if self.offset + n > len(self.data):
            raise EncodingError(f"truncated: needed {n} bytes at offset {self.offset}, have {len(self.data) - self.offset}")
        chunk = bytes(self.data[self.offset : self.offset + n])
        self.offset += n
        return chunk

    def length(self) -> int:
        return struct.unpack(">I", self.take(4))[0]


def _decode_scalar(name: str, raw: bytes) -> Any:
    if name in _INT_FORMATS:
        return struct.unpack(_INT_FORMATS[name], raw)[0]
    if name == "u256":
        return int.from_bytes(raw, "big")
    if name == "f32":
        return struct.unpack(">f", raw)[0]
    if name == "f64":
        return struct.unpack(">d", raw)[0]
    return raw


def _decode_value(reader: _Reader, wire: Any) -> Any:
    if isinstance(wire, tuple):
        return tuple(_decode_record(reader, wire[1]) for _ in range(reader.length()))
    if dataclasses.is_dataclass(wire):
        return _decode_record(reader, wire)
    if wire.name in _INT_LIST_FORMATS:
        code, size, _ = _INT_LIST_FORMATS[wire.name]
        count = reader.length()
        return struct.unpack(f">{count}{code}", reader.take(count * size))
    if wire.name in _LIST_ITEM:
        item_name, size = _LIST_ITEM[wire.name]
        return tuple(_decode_scalar(item_name, reader.take(size)) for _ in range(reader.length()))
    if wire.size is None:
        raw = reader.take(reader.length())
        return _decode_text(raw) if wire.name == "text" else raw
    return _decode_scalar(wire.name, reader.take(wire.size))


def _decode_text(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise EncodingError(f"text field is not UTF-8: {exc}") from None


def _decode_record(reader: _Reader, cls: type[R]) -> R:
    values = {name: _decode_value(reader, wire) for name, wire in _field_wires(cls)}
    return cls(**values)


def decode(cls: type[R], data: bytes) -> R:
    """Decode ``data`` as a ``cls`` record; raise EncodingError on any trailing or missing byte."""
    reader = _Reader(data)
    record = _decode_record(reader, cls)
    if reader.offset != len(data):
        raise EncodingError(f"{len(data) - reader.offset} trailing bytes after {cls.__name__}")
    return record
