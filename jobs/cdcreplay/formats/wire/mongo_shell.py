"""A parser for MongoDB shell syntax, the text DRS writes in the ``value`` and ``where`` of its DDS messages.

DRS prints documents as the mongo shell / the Java driver's ``JsonMode.SHELL`` does: JSON plus constructors, e.g.
``{"_id": ObjectId("64650cf67dc36a464e76e583"), "n": NumberLong(5), "at": ISODate("2023-05-17T09:18:31.439Z")}``.
This is a tokenizer and a recursive-descent parser over that grammar (never regular expressions over the text):

  value       := document | array | string | number | true | false | null | undefined | NaN | Infinity | -Infinity
                 | regex | constructor
  document    := "{" [ member ("," member)* [","] ] "}"        member := (string | identifier) ":" value
  array       := "[" [ value ("," value)* [","] ] "]"
  constructor := ["new"] Name "(" [ value ("," value)* ] ")"   | MinKey | MaxKey   (the two without parentheses too)
  string      := "..." | '...'  with JSON escapes (\\uXXXX, surrogate pairs) and \\'
  number      := JSON number, optionally signed with "+"; an integer is an int (int32/int64 range), otherwise a double

Constructors: ObjectId(hex), ISODate(iso) / new Date(iso | millis), NumberInt(n | "n"), NumberLong(n | "n"),
NumberDecimal("d"), BinData(subtype, "base64"), HexData(subtype, "hex"), UUID("hex"), Timestamp(t, i), MinKey(),
MaxKey(), DBRef("coll", id[, "db"]) (as the document ``{$ref, $id[, $db]}``), RegExp("pattern"[, "flags"]).
Anything else -- an unknown name, ``ISODate()`` without an argument (the current time), a function, an expression --
raises :class:`ShellSyntaxError` naming what and where. Values come out as :mod:`cdcreplay.formats.values.mongo_values`.
"""

from __future__ import annotations

import base64
import binascii
import math
from dataclasses import dataclass

from cdcreplay.formats.values.mongo_values import (
    MAX_KEY,
    MIN_KEY,
    UNDEFINED,
    Binary,
    Decimal128,
    MongoDate,
    MongoTimestamp,
    MongoValueError,
    ObjectId,
    Regex,
    check_int64,
)

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
MAX_DEPTH = 200  # nesting deeper than BSON's practical limit (100) is hostile input, not a document


class ShellSyntaxError(ValueError):
    """Text the parser does not accept; the message names the construct and its offset."""


@dataclass(frozen=True)
class Token:
    kind: str  # punct, string, number, name, regex, end
    text: str
    value: object
    offset: int


PUNCTUATION = "{}[]():,"
NAME_START = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_$")
NAME_PART = NAME_START | set("0123456789")
ESCAPES = {'"': '"', "'": "'", "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


class _Lexer:
    def __init__(self, text: str):
        self.text = text
        self.at = 0
        self.previous: str | None = None  # kind+text of the last token: a "/" after a value is no regex

    def error(self, message: str, offset: int | None = None) -> ShellSyntaxError:
        where = self.at if offset is None else offset
        snippet = self.text[max(0, where - 20) : where + 20]
        return ShellSyntaxError(f"{message} at offset {where} (near {snippet!r})")

    def tokens(self) -> list[Token]:
        out = []
        while True:
            token = self._next()
            out.append(token)
            self.previous = token.kind if token.kind != "punct" else token.text
            if token.kind == "end":
                return out

    def _next(self) -> Token:
        text = self.text
        while self.at < len(text) and text[self.at] in " \t\r\n\ufeff":
            self.at += 1
        start = self.at
        if start >= len(text):
            return Token("end", "", None, start)
        char = text[start]
        if char in PUNCTUATION:
            self.at += 1
            return Token("punct", char, None, start)
        if char in "\"'":
            return Token("string", char, self._string(char), start)
        if char in "-+0123456789." and not text.startswith(("-Infinity", "+Infinity"), start):
            return self._number(start)
        if char in "-+" and text.startswith(("-Infinity", "+Infinity"), start):
            self.at += len("-Infinity")
            return Token("number", text[start : self.at], -math.inf if char == "-" else math.inf, start)
        if char in NAME_START:
            while self.at < len(text) and text[self.at] in NAME_PART:
                self.at += 1
            name = text[start : self.at]
            return Token("name", name, name, start)
        if char == "/" and self.previous in (None, ":", ",", "[", "("):
            return Token("regex", "/", self._regex(), start)
        raise self.error(f"unexpected character {char!r}")

    def _string(self, quote: str) -> str:
        text = self.text
        self.at += 1
        parts = []
        while True:
            if self.at >= len(text):
                raise self.error("unterminated string")
            char = text[self.at]
            if char == quote:
                self.at += 1
                return "".join(parts)
            if char == "\\":
                self.at += 1
                escape = text[self.at : self.at + 1]
                if escape == "u":
                    parts.append(self._unicode_escape())
                    continue
                if escape not in ESCAPES:
                    raise self.error(f"unknown escape \\{escape}")
                parts.append(ESCAPES[escape])
                self.at += 1
                continue
            if char in "\n\r":
                raise self.error("line break inside a string")
            parts.append(char)
            self.at += 1

    def _hex4(self) -> int:
        digits = self.text[self.at + 1 : self.at + 5]
        if len(digits) != 4 or any(c not in "0123456789abcdefABCDEF" for c in digits):
            raise self.error("\\u escape needs four hex digits")
        self.at += 5
        return int(digits, 16)

    def _unicode_escape(self) -> str:
        code = self._hex4()
        if 0xD800 <= code <= 0xDBFF and self.text.startswith("\\u", self.at):
            low_at = self.at
            self.at += 1
            low = self._hex4()
            if 0xDC00 <= low <= 0xDFFF:
                return chr(0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00))
            self.at = low_at
        if 0xD800 <= code <= 0xDFFF:
            raise self.error("lone surrogate in a \\u escape")
        return chr(code)

    def _number(self, start: int) -> Token:
        text = self.text
        at = start
        if text[at] in "+-":
            at += 1
        digits_start = at
        while at < len(text) and text[at].isdigit():
            at += 1
        integer_digits = at - digits_start
        is_double = False
        if at < len(text) and text[at] == ".":
            at += 1
            fraction_start = at
            while at < len(text) and text[at].isdigit():
                at += 1
            if at == fraction_start and integer_digits == 0:
                raise self.error("a number needs digits", start)
            is_double = True
        elif integer_digits == 0:
            raise self.error("a number needs digits", start)
        if at < len(text) and text[at] in "eE":
            at += 1
            if at < len(text) and text[at] in "+-":
                at += 1
            exponent_start = at
            while at < len(text) and text[at].isdigit():
                at += 1
            if at == exponent_start:
                raise self.error("an exponent needs digits", start)
            is_double = True
        if at < len(text) and text[at] in NAME_PART:
            raise self.error("a number runs into a name", start)
        self.at = at
        literal = text[start:at]
        if is_double:
            return Token("number", literal, float(literal), start)
        value = int(literal)
        # The Java driver reads an integer literal as int32, else int64, else a double.
        if not -(2**63) <= value <= 2**63 - 1:
            return Token("number", literal, float(literal), start)
        return Token("number", literal, value, start)

    def _regex(self) -> Regex:
        text = self.text
        self.at += 1
        pattern = []
        in_class = False
        while True:
            if self.at >= len(text) or text[self.at] in "\r\n":
                raise self.error("unterminated regular expression")
            char = text[self.at]
            if char == "\\":
                pattern.append(text[self.at : self.at + 2])
                self.at += 2
                continue
            if char == "[":
                in_class = True
            elif char == "]":
                in_class = False
            elif char == "/" and not in_class:
                self.at += 1
                break
            pattern.append(char)
            self.at += 1
        flags_start = self.at
        while self.at < len(text) and text[self.at] in NAME_PART:
            self.at += 1
        flags = text[flags_start : self.at]
        if any(flag not in "imxslu" for flag in flags):
            raise self.error(f"unknown regular expression flag in {flags!r}", flags_start)
        return Regex("".join(pattern), flags)


class _Parser:
    def __init__(self, text: str):
        self.lexer = _Lexer(text)
        self.tokens = self.lexer.tokens()
        self.index = 0
        self.depth = 0

    def peek(self) -> Token:
        return self.tokens[self.index]

    def take(self) -> Token:
        token = self.tokens[self.index]
        self.index += 1
        return token

    def expect(self, punct: str) -> Token:
        token = self.take()
        if token.kind != "punct" or token.text != punct:
            raise self.lexer.error(f"expected {punct!r}, found {_describe(token)}", token.offset)
        return token

    def value(self):
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.lexer.error(f"nesting deeper than {MAX_DEPTH} levels", self.peek().offset)
        try:
            return self._value()
        finally:
            self.depth -= 1

    def _value(self):
        token = self.take()
        if token.kind == "punct" and token.text == "{":
            return self._document()
        if token.kind == "punct" and token.text == "[":
            return self._array()
        if token.kind in ("string", "number", "regex"):
            return token.value
        if token.kind == "name":
            return self._name(token)
        raise self.lexer.error(f"expected a value, found {_describe(token)}", token.offset)

    def _document(self) -> dict:
        document: dict = {}
        if self._closes("}"):
            return document
        while True:
            token = self.take()
            if token.kind not in ("string", "name"):
                raise self.lexer.error(f"expected a field name, found {_describe(token)}", token.offset)
            name = token.value
            if name in document:
                raise self.lexer.error(f"field {name!r} appears twice in one document", token.offset)
            self.expect(":")
            document[name] = self.value()
            if self._closes("}"):
                return document
            self.expect(",")
            if self._closes("}"):  # a trailing comma, as the shell allows
                return document

    def _array(self) -> list:
        items: list = []
        if self._closes("]"):
            return items
        while True:
            items.append(self.value())
            if self._closes("]"):
                return items
            self.expect(",")
            if self._closes("]"):
                return items

    def _closes(self, punct: str) -> bool:
        token = self.peek()
        if token.kind == "punct" and token.text == punct:
            self.index += 1
            return True
        return False

    def _arguments(self) -> list:
        self.expect("(")
        arguments: list = []
        if self._closes(")"):
            return arguments
        while True:
            arguments.append(self.value())
            if self._closes(")"):
                return arguments
            self.expect(",")

    def _name(self, token: Token):
        name = token.text
        literals = {"true": True, "false": False, "null": None, "undefined": UNDEFINED}
        if name in literals:
            return literals[name]
        if name == "NaN":
            return math.nan
        if name == "Infinity":
            return math.inf
        if name == "new":
            token = self.take()
            if token.kind != "name":
                raise self.lexer.error(f"expected a constructor after 'new', found {_describe(token)}", token.offset)
            name = token.text
        if name in ("MinKey", "MaxKey") and not (self.peek().kind == "punct" and self.peek().text == "("):
            return MIN_KEY if name == "MinKey" else MAX_KEY
        builder = CONSTRUCTORS.get(name)
        if builder is None:
            raise self.lexer.error(f"unknown shell construct {name!r}", token.offset)
        arguments = self._arguments()
        try:
            return builder(arguments)
        except (MongoValueError, ValueError, binascii.Error) as error:  # ShellSyntaxError included: add the place
            raise self.lexer.error(f"{name}(...): {error}", token.offset) from None


def _describe(token: Token) -> str:
    return "the end of the text" if token.kind == "end" else repr(token.text)


def _arity(name: str, arguments: list, *counts: int) -> None:
    if len(arguments) not in counts:
        expected = " or ".join(str(c) for c in counts)
        raise ShellSyntaxError(f"{name}() takes {expected} argument(s), got {len(arguments)}")


def _text(name: str, argument) -> str:
    if not isinstance(argument, str):
        raise ShellSyntaxError(f"{name}() needs a string argument, got {argument!r}")
    return argument


def _integer(name: str, argument, low: int, high: int) -> int:
    if isinstance(argument, bool):
        raise ShellSyntaxError(f"{name}() needs a number, got {argument!r}")
    if isinstance(argument, str):
        try:
            argument = int(argument.strip())
        except ValueError:
            raise ShellSyntaxError(f"{name}({argument!r}) is not an integer") from None
    if isinstance(argument, float):
        if not argument.is_integer():
            raise ShellSyntaxError(f"{name}({argument!r}) is not an integer")
        argument = int(argument)
    if not isinstance(argument, int) or not low <= argument <= high:
        raise ShellSyntaxError(f"{name}({argument!r}) is out of range")
    return argument


def _object_id(arguments: list) -> ObjectId:
    _arity("ObjectId", arguments, 1)
    return ObjectId(_text("ObjectId", arguments[0]).lower())


def _date(arguments: list) -> MongoDate:
    # ISODate() / new Date() without an argument is "now": not a recorded value, so not accepted.
    _arity("ISODate", arguments, 1)
    argument = arguments[0]
    if isinstance(argument, str):
        return MongoDate.parse_iso(argument)
    return MongoDate(_integer("Date", argument, -(2**63), 2**63 - 1))


def _number_int(arguments: list) -> int:
    _arity("NumberInt", arguments, 1)
    return _integer("NumberInt", arguments[0], INT32_MIN, INT32_MAX)


def _number_long(arguments: list) -> int:
    _arity("NumberLong", arguments, 1)
    return check_int64(_integer("NumberLong", arguments[0], -(2**63), 2**63 - 1))


def _number_decimal(arguments: list) -> Decimal128:
    _arity("NumberDecimal", arguments, 1)
    argument = arguments[0]
    if isinstance(argument, int | float) and not isinstance(argument, bool):
        argument = repr(argument)  # NumberDecimal(1.5): the shell converts the double's shortest text
    return Decimal128.parse(_text("NumberDecimal", argument))


def _bin_data(arguments: list) -> Binary:
    _arity("BinData", arguments, 2)
    subtype = _integer("BinData", arguments[0], 0, 255)
    return Binary(subtype, base64.b64decode(_text("BinData", arguments[1]), validate=True))


def _hex_data(arguments: list) -> Binary:
    _arity("HexData", arguments, 2)
    subtype = _integer("HexData", arguments[0], 0, 255)
    return Binary(subtype, bytes.fromhex(_text("HexData", arguments[1])))


def _uuid(arguments: list) -> Binary:
    _arity("UUID", arguments, 1)
    digits = _text("UUID", arguments[0]).replace("-", "")
    if len(digits) != 32:
        raise ShellSyntaxError(f"UUID({arguments[0]!r}) needs 32 hex digits")
    return Binary(4, bytes.fromhex(digits))


def _timestamp(arguments: list) -> MongoTimestamp:
    if len(arguments) == 1 and isinstance(arguments[0], dict) and set(arguments[0]) == {"t", "i"}:
        arguments = [arguments[0]["t"], arguments[0]["i"]]
    _arity("Timestamp", arguments, 2)
    seconds, increment = (_integer("Timestamp", argument, 0, 2**32 - 1) for argument in arguments)
    return MongoTimestamp(seconds, increment)


def _key(name: str):
    def build(arguments: list):
        _arity(name, arguments, 0)
        return MIN_KEY if name == "MinKey" else MAX_KEY

    return build


def _db_ref(arguments: list) -> dict:
    _arity("DBRef", arguments, 2, 3)
    reference = {"$ref": _text("DBRef", arguments[0]), "$id": arguments[1]}
    if len(arguments) == 3:
        reference["$db"] = _text("DBRef", arguments[2])
    return reference


def _reg_exp(arguments: list) -> Regex:
    _arity("RegExp", arguments, 1, 2)
    flags = _text("RegExp", arguments[1]) if len(arguments) == 2 else ""
    if any(flag not in "imxslu" for flag in flags):
        raise ShellSyntaxError(f"RegExp() flags {flags!r} are not regular expression flags")
    return Regex(_text("RegExp", arguments[0]), flags)


CONSTRUCTORS = {
    "ObjectId": _object_id,
    "ISODate": _date,
    "Date": _date,
    "NumberInt": _number_int,
    "NumberLong": _number_long,
    "NumberDecimal": _number_decimal,
    "BinData": _bin_data,
    "HexData": _hex_data,
    "UUID": _uuid,
    "Timestamp": _timestamp,
    "MinKey": _key("MinKey"),
    "MaxKey": _key("MaxKey"),
    "DBRef": _db_ref,
    "RegExp": _reg_exp,
}


def parse(text: str):
    """One shell-syntax value (usually a document) -> its BSON value; :class:`ShellSyntaxError` otherwise."""
    if not isinstance(text, str):
        raise ShellSyntaxError(f"expected shell text, got {type(text).__name__}")
    parser = _Parser(text)
    value = parser.value()
    trailing = parser.take()
    if trailing.kind != "end":
        raise parser.lexer.error(f"unexpected {_describe(trailing)} after the value", trailing.offset)
    return value
