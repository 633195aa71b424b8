"""Mongo shell syntax (DRS DDS `value`/`where`), Extended JSON, `_id` identity and $set/$unset -- plain Python."""

from __future__ import annotations

import math
from decimal import Decimal

import pytest

from cdcreplay.formats.envelopes.mongo_update import UpdateError, apply_update
from cdcreplay.formats.values.mongo_values import (
    MAX_KEY,
    MIN_KEY,
    UNDEFINED,
    Binary,
    Decimal128,
    MongoDate,
    MongoTimestamp,
    ObjectId,
    Regex,
    dumps,
    key_text,
    loads,
)
from cdcreplay.formats.wire.mongo_shell import ShellSyntaxError, parse


def test_the_vendor_samples_parse():
    assert parse(
        '{"_id": ObjectId("64650cf67dc36a464e76e583"), "c1": "baz", "tags": ["mongodb", "database", "NoSQL"]}'
    ) == {
        "_id": ObjectId("64650cf67dc36a464e76e583"),
        "c1": "baz",
        "tags": ["mongodb", "database", "NoSQL"],
    }
    assert parse('{"$unset": {"c1": true}, "$set": {"column1": "aaa"}}') == {
        "$unset": {"c1": True},
        "$set": {"column1": "aaa"},
    }


def test_every_constructor_and_literal():
    text = (
        '{a: NumberLong(5), b: NumberLong("9223372036854775807"), c: 1.0, d: 1E3, e: -Infinity, f: NaN, '
        'g: NumberDecimal("12.50"), h: ISODate("1969-07-20T20:17:40Z"), i: new Date(0), j: BinData(0, "AQID"), '
        "k: Timestamp(1, 2), l: /ab[/]c/i, m: MinKey, n: MaxKey(), o: undefined, "
        'p: UUID("01234567-89ab-cdef-0123-456789abcdef"), q: \'it\\\'s\', r: "\\ud83d\\udce6", s: [], t: {}, '
        'u: NumberInt("-7"), v: 12345678901, w: HexData(5, "0aff"), x: DBRef("c", 1), y: null, z: +2, '
        'aa: RegExp("^x", "m"), bb: ISODate("2023-05-17T17:18:31.439+08:00"), cc: [1, 2,], dd: true}'
    )
    value = parse(text)
    assert value == {
        "a": 5,
        "b": 2**63 - 1,
        "c": 1.0,
        "d": 1000.0,
        "e": -math.inf,
        "f": value["f"],
        "g": Decimal128(Decimal("12.50")),
        "h": MongoDate(-14182940000),
        "i": MongoDate(0),
        "j": Binary(0, b"\x01\x02\x03"),
        "k": MongoTimestamp(1, 2),
        "l": Regex("ab[/]c", "i"),
        "m": MIN_KEY,
        "n": MAX_KEY,
        "o": UNDEFINED,
        "p": Binary(4, bytes.fromhex("0123456789abcdef0123456789abcdef")),
        "q": "it's",
        "r": "📦",
        "s": [],
        "t": {},
        "u": -7,
        "v": 12345678901,
        "w": Binary(5, b"\x0a\xff"),
        "x": {"$ref": "c", "$id": 1},
        "y": None,
        "z": 2,
        "aa": Regex("^x", "m"),
        "bb": MongoDate(1684315111439),
        "cc": [1, 2],
        "dd": True,
    }
    assert math.isnan(value["f"]) and isinstance(value["c"], float) and isinstance(value["a"], int)
    assert str(value["g"].value) == "12.50"  # exact: the trailing zero stays


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"a": Code("x")}', "unknown shell construct 'Code' at offset 6"),
        ('{"a": ISODate()}', "ISODate() takes 1 argument(s), got 0"),
        ('{"a": ObjectId("xyz")}', "ObjectId needs 24 lowercase hex digits, got 'xyz'"),
        ('{"a": 1', "expected ',', found the end of the text"),
        ('{"a": 1} x', "unexpected 'x' after the value at offset 9"),
        ('{"a": function() {}}', "unknown shell construct 'function'"),
        ('{"a": NumberLong("9223372036854775808")}', "NumberLong(9223372036854775808) is out of range"),
        ('{"a": NumberInt(2147483648)}', "NumberInt(2147483648) is out of range"),
        ('{"a": 1, "a": 2}', "field 'a' appears twice in one document"),
        ('{"a": 1 + 2}', "a number needs digits at offset 8"),
        ('{"a": "tab\\q"}', "unknown escape \\q"),
        ('{"a": "\\ud800"}', "lone surrogate"),
        ('{"a": BinData(0, "not base64!")}', "BinData(...)"),
        ('{"a": ISODate("2023-05-17T09:18:31.439123Z")}', "more than millisecond precision"),
        ('{"a": /x/q}', "unknown regular expression flag"),
        ("[" * 300 + "]" * 300, "nesting deeper than 200 levels"),
        ('{"a": 01x}', "a number runs into a name"),
        ("", "expected a value, found the end of the text"),
    ],
)
def test_unknown_or_malformed_syntax_is_named(text, message):
    with pytest.raises(ShellSyntaxError) as error:
        parse(text)
    assert message in str(error.value)


def test_extended_json_round_trips_every_value():
    value = parse(
        '{"_id": ObjectId("64650cf67dc36a464e76e583"), "n": NumberLong("9007199254740993"), "d": 0.1, '
        '"z": -0.0, "inf": Infinity, "dec": NumberDecimal("-1.230E+5"), "old": new Date(-1), "new": ISODate("2020-01-01"), '
        '"far": new Date(253402300800000), "bin": BinData(128, ""), "ts": Timestamp(4294967295, 1), '
        '"re": /a"b/sim, "keys": [MinKey, MaxKey, undefined], "nested": {"a": [{"b": null}]}}'
    )
    text = dumps(value)
    assert text == (
        '{"_id":{"$oid":"64650cf67dc36a464e76e583"},"n":9007199254740993,"d":0.1,"z":-0.0,'
        '"inf":{"$numberDouble":"Infinity"},"dec":{"$numberDecimal":"-1.230E+5"},'
        '"old":{"$date":{"$numberLong":"-1"}},"new":{"$date":"2020-01-01T00:00:00.000Z"},'
        '"far":{"$date":{"$numberLong":"253402300800000"}},"bin":{"$binary":{"base64":"","subType":"80"}},'
        '"ts":{"$timestamp":{"t":4294967295,"i":1}},"re":{"$regularExpression":{"pattern":"a\\"b","options":"ims"}},'
        '"keys":[{"$minKey":1},{"$maxKey":1},{"$undefined":true}],"nested":{"a":[{"b":null}]}}'
    )
    assert loads(text) == value and dumps(loads(text)) == text


def test_id_identity_follows_bson_comparison():
    five = [parse(t) for t in ("5", "NumberLong(5)", "5.0", 'NumberDecimal("5.00")', "NumberInt(5)")]
    assert {key_text(v) for v in five} == {'{"$number":"5"}'}
    assert key_text("5") == '"5"' != key_text(5)
    oid = parse('ObjectId("64650cf67dc36a464e76e583")')
    assert key_text(oid) == '{"$oid":"64650cf67dc36a464e76e583"}' != key_text("64650cf67dc36a464e76e583")
    assert (
        key_text({"order_id": parse("NumberLong(7)"), "line_no": 1})
        == '{"order_id":{"$number":"7"},"line_no":{"$number":"1"}}'
    )
    assert key_text(-0.0) == key_text(0)


def test_set_and_unset_apply_to_nested_documents_and_arrays():
    document = {"_id": 1, "a": {"b": 1, "keep": True}, "arr": [1, 2], "s": 5}
    updated = apply_update(
        document,
        {
            "$set": {"a.c": 2, "arr.4": 9, "new.x.y": 1, "arr.1": 7, "s": "five"},
            "$unset": {"a.b": True, "nope.x": True, "arr.0": True},
        },
    )
    assert updated == {
        "_id": 1,
        "a": {"keep": True, "c": 2},
        "arr": [None, 7, None, None, 9],
        "s": "five",
        "new": {"x": {"y": 1}},
    }
    assert list(updated) == ["_id", "a", "arr", "s", "new"]  # new fields come after the existing ones
    assert document == {"_id": 1, "a": {"b": 1, "keep": True}, "arr": [1, 2], "s": 5}  # untouched
    assert apply_update(document, {"$set": {"arr.3.k": 1}})["arr"] == [1, 2, None, {"k": 1}]
    assert apply_update(document, {"$set": {"_id": 1}}) == document  # the same _id is allowed


@pytest.mark.parametrize(
    ("update", "message", "unsupported"),
    [
        ({"$inc": {"a": 1}}, "update operator '$inc' is not one DRS writes", True),
        ({"x": 1}, "update field (a replacement document, not an update) 'x'", True),
        ({"$set": {"s.x": 1}}, "$set 's.x': 's' is not a document or array", False),
        ({"$set": {"arr.x": 1}}, "'x' is not an index of the array at 'arr'", False),
        ({"$set": {"a": 1}, "$unset": {"a.b": True}}, "paths 'a' and 'a.b' of one update conflict", False),
        ({"$set": {"a": 1, "a-x": 2, "a.b": 3}}, "paths 'a' and 'a.b' of one update conflict", False),
        ({"$set": {"_id": 2}}, "an update cannot change _id", False),
        ({"$unset": {"_id": True}}, "an update cannot remove _id", False),
        ({"$set": {"a..b": 1}}, "path 'a..b' has an empty part", False),
        ({"$set": {}}, "$set needs a non-empty document of paths", False),
        ({}, "an update must be a non-empty document of operators", False),
    ],
)
def test_updates_the_applier_refuses(update, message, unsupported):
    with pytest.raises(UpdateError) as error:
        apply_update({"_id": 1, "a": {"b": 1}, "arr": [1], "s": 5}, update)
    assert message in str(error.value)
    assert error.value.unsupported is unsupported
