"""Read and extend a SentencePiece model file (`tokenizer.model`, a serialized `ModelProto`) without protobuf.

Only what vocabshift needs is decoded: the pieces (text, score, type), the model type and byte fallback of the
trainer spec. Everything else is kept byte for byte, old pieces included, so that an extended file differs from
its original only by the pieces appended, the trainer spec's vocabulary size and the self-test samples left out
(`sentencepiece` runs them when it loads a file, and new pieces may change how they are cut).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import NamedTuple

__all__ = ["BPE", "BYTE", "CONTROL", "NORMAL", "UNIGRAM", "USER_DEFINED", "Piece", "SentencePieceModel", "parse_model"]

# enum values of sentencepiece_model.proto
NORMAL, CONTROL, USER_DEFINED, BYTE = 1, 3, 4, 6
UNIGRAM, BPE = 1, 2
# field numbers: ModelProto.pieces, .trainer_spec, .self_test_data; SentencePiece.piece, .score, .type;
# TrainerSpec.model_type, .vocab_size, .byte_fallback
_PIECES, _TRAINER, _SELF_TEST = 1, 2, 4
_TEXT, _SCORE, _TYPE = 1, 2, 3
_MODEL_TYPE, _VOCAB_SIZE, _BYTE_FALLBACK = 3, 4, 35
_VARINT, _FIXED64, _BYTES, _FIXED32 = 0, 1, 2, 5


class Piece(NamedTuple):
    """One entry of the vocabulary: its text, score and type (`NORMAL`, `BYTE`, ...)."""

    text: str
    score: float
    type: int = NORMAL


class _Field(NamedTuple):
    number: int
    wire: int
    value: int | bytes  # an int for varints and fixed-width numbers, the payload for length-delimited fields
    raw: bytes  # the whole field, tag included


@dataclass(frozen=True)
class SentencePieceModel:
    """A parsed `ModelProto`: its fields as they were read, and the decoded pieces and trainer settings."""

    fields: tuple[_Field, ...]
    pieces: tuple[Piece, ...]
    model_type: int
    byte_fallback: bool

    def extended(self, new: list[Piece]) -> bytes:
        """The serialized model with `new` appended to the pieces (ids from `len(self.pieces)` on)."""
        size = len(self.pieces) + len(new)
        out = bytearray()
        for field in self.fields:
            if field.number == _TRAINER and field.wire == _BYTES:
                assert isinstance(field.value, bytes)
                out += _length_field(_TRAINER, _with_vocab_size(field.value, size))
            elif field.number != _SELF_TEST:
                out += field.raw
        for piece in new:
            payload = (_length_field(_TEXT, piece.text.encode()) + _tag(_SCORE, _FIXED32)
                       + struct.pack("<f", piece.score) + _tag(_TYPE, _VARINT) + _varint(piece.type))
            out += _length_field(_PIECES, payload)
        return bytes(out)


def parse_model(data: bytes) -> SentencePieceModel:
    """Parse a SentencePiece model file.

    Raises:
        `ValueError`: `data` is not a serialized `ModelProto` with pieces (e.g. a tiktoken file).
    """
    fields = tuple(_fields(data))
    pieces = tuple(_piece(field.value) for field in fields if field.number == _PIECES and isinstance(field.value,
                                                                                                       bytes))
    if not pieces or any(field.number == _PIECES and field.wire != _BYTES for field in fields):
        raise ValueError("not a SentencePiece model: it holds no pieces")
    trainer = {f.number: f.value for spec in fields if spec.number == _TRAINER and isinstance(spec.value, bytes)
               for f in _fields(spec.value)}
    model_type = trainer.get(_MODEL_TYPE, UNIGRAM)
    return SentencePieceModel(fields, pieces, int(model_type) if isinstance(model_type, int) else -1,
                              bool(trainer.get(_BYTE_FALLBACK, 0)))


def _piece(payload: bytes) -> Piece:
    values = {field.number: field.value for field in _fields(payload)}
    text, score, kind = values.get(_TEXT, b""), values.get(_SCORE, 0), values.get(_TYPE, NORMAL)
    if not isinstance(text, bytes) or not isinstance(score, int) or not isinstance(kind, int):
        raise ValueError("not a SentencePiece model: a piece of the wrong shape")
    return Piece(text.decode("utf-8"), struct.unpack("<f", score.to_bytes(4, "little"))[0], kind)


def _fields(data: bytes) -> list[_Field]:
    """The fields of one protobuf message, in order (unknown ones included)."""
    fields, position = [], 0
    while position < len(data):
        start = position
        tag, position = _read_varint(data, position)
        number, wire = tag >> 3, tag & 7
        value: int | bytes
        if wire == _VARINT:
            value, position = _read_varint(data, position)
        elif wire in (_FIXED64, _FIXED32):
            width = 8 if wire == _FIXED64 else 4
            value, position = int.from_bytes(data[position : position + width], "little"), position + width
        elif wire == _BYTES:
            length, position = _read_varint(data, position)
            value, position = data[position : position + length], position + length
        else:
            raise ValueError(f"not a SentencePiece model: protobuf wire type {wire}")
        if position > len(data) or number == 0:
            raise ValueError("not a SentencePiece model: truncated or not protobuf")
        fields.append(_Field(number, wire, value, data[start:position]))
    return fields


def _with_vocab_size(trainer: bytes, size: int) -> bytes:
    kept = b"".join(field.raw for field in _fields(trainer) if field.number != _VOCAB_SIZE)
    return kept + _tag(_VOCAB_SIZE, _VARINT) + _varint(size)


def _read_varint(data: bytes, position: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if position >= len(data) or shift > 63:
            raise ValueError("not a SentencePiece model: a truncated number")
        byte = data[position]
        result |= (byte & 0x7F) << shift
        position, shift = position + 1, shift + 7
        if not byte & 0x80:
            return result, position


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _tag(number: int, wire: int) -> bytes:
    return _varint(number << 3 | wire)


def _length_field(number: int, payload: bytes) -> bytes:
    return _tag(number, _BYTES) + _varint(len(payload)) + payload
