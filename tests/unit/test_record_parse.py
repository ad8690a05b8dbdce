"""Parsed records are cached in every process (up to 8,192), so they share what they can: one
fields set, one namespace tuple per namespace, one metadata object per distinct short JSON text.
Sharing must never leak a change from one record into another, and a parsed record must equal
the one validated the long way."""

from __future__ import annotations

from memory.backends.sqlite_schema import row_to_record
from memory.records import MemoryMetadata, MemoryRecord

META = '{"type":"note","source":"user","tags":[],"agent":null,"extra":{}}'


def _row(rid: int, meta: str = META, ns: str = "user_profile/u1") -> tuple[object, ...]:
    return (rid, f"m{rid}", ns, f"memory {rid}", meta, 1_700_000_000.0 + rid, 1_700_000_000.5 + rid, None)


def test_parsed_records_share_fields_namespace_and_metadata() -> None:
    a, b = row_to_record(_row(1)), row_to_record(_row(2))
    assert a.__pydantic_fields_set__ is b.__pydantic_fields_set__
    assert a.namespace is b.namespace == ("user_profile", "u1")
    assert a.metadata is b.metadata
    assert a.metadata.__pydantic_fields_set__ == set(MemoryMetadata.model_fields)


def test_parsed_record_equals_a_validated_one() -> None:
    rec = row_to_record(_row(3))
    again = MemoryRecord.model_validate(rec.model_dump())
    assert again == rec
    assert rec.model_fields_set == again.model_fields_set == set(MemoryRecord.model_fields)
    assert rec.model_dump(exclude_unset=True) == again.model_dump(exclude_unset=True)


def test_copies_do_not_change_the_shared_parts() -> None:
    a, b = row_to_record(_row(4)), row_to_record(_row(5))
    fields = set(a.__pydantic_fields_set__)
    meta = a.metadata.model_copy(update={"extra": {"k": 1}})
    c = a.model_copy(update={"content": "changed", "metadata": meta})
    assert c.content == "changed" and c.metadata.extra == {"k": 1}
    assert b.content == "memory 5" and b.metadata.extra == {} and a.metadata.extra == {}
    assert a.__pydantic_fields_set__ == fields == b.__pydantic_fields_set__


def test_long_metadata_is_parsed_per_record() -> None:
    long = '{"type":"note","source":"user","tags":[],"agent":null,"extra":{"context":"' + "x" * 400 + '"}}'
    a, b = row_to_record(_row(6, long)), row_to_record(_row(7, long))
    assert a.metadata == b.metadata and a.metadata is not b.metadata  # rarely repeated: not kept
