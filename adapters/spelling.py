"""An upstream file's own text, entry by entry: what a table's ``spelling`` (schema 1.8)
is made from at import and what an exporter writes back from it.

Two file shapes, each cut losslessly into a head, one text per entry and a tail:

- a CSV file (aiter's): the head is the header record with its line ending (and a leading
  byte-order mark), each record (a row, a blank line, a line the csv module cannot read)
  is one entry, ``line N``, its text with its own line ending; no tail;
- a JSON object (vLLM's): the head is everything up to ``{``, each member is one entry,
  ``"name"``, its text running from after the ``{`` or ``,`` before it to the ``,`` after
  it (the last, to the end of its value); the tail is the rest (the closing brace, the
  final newline or none).

The standard text of an entry is what an exporter writes for it without a spelling; a
spelled text is kept only where it differs, and written only where it reads back as
what is written in its place (:func:`csv_text_reads_as`, :func:`json_text_reads_as`).
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterator, Sequence
from typing import Any

from flyconfigs.errors import ArtifactError, FieldProblem
from flyconfigs.kernels.aiter_family import cell_value
from flyconfigs.schema.canonical import canonical_text

__all__ = [
    "JSON_HEAD",
    "JSON_TAIL",
    "CsvRecord",
    "csv_line",
    "csv_records",
    "csv_text_reads_as",
    "json_member_text",
    "json_members",
    "json_text_reads_as",
    "line_ending",
    "with_ending",
]

JSON_HEAD = "{"
JSON_TAIL = "\n}\n"
"""What an exporter writes before the first and after the last member of a vLLM file
without a spelling (``json.dumps(…, indent=N)`` and a final newline)."""

_ENDING = re.compile(r"(\r\n|\n|\r)$")
_WS = re.compile(r"[ \t\n\r]*")


def line_ending(text: str) -> str:
    """The line ending ``text`` ends with (``\\r\\n``, ``\\n``, ``\\r``), or ``""``."""
    found = _ENDING.search(text)
    return found.group(1) if found else ""


def with_ending(text: str, newline: str) -> str:
    """``text`` ended by a line ending: its own, else ``newline`` (what goes between two
    records when the file's last one had none and another now follows it)."""
    return text if line_ending(text) else text + newline


def csv_line(cells: Sequence[str], newline: str = "\n") -> str:
    """One record as Python's csv module writes it, ended by ``newline``."""
    out = io.StringIO(newline="")
    csv.writer(out, lineterminator=newline).writerow(cells)
    return out.getvalue()


class _Tap:
    """The physical lines of a text, keeping those taken since the last :meth:`take`."""

    def __init__(self, text: str) -> None:
        self._lines = iter(io.StringIO(text, newline=""))
        self._taken: list[str] = []

    def __iter__(self) -> _Tap:
        return self

    def __next__(self) -> str:
        line = next(self._lines)
        self._taken.append(line)
        return line

    def take(self) -> str:
        text, self._taken = "".join(self._taken), []
        return text

    def rest(self) -> str:
        return self.take() + "".join(self._lines)


CsvRecord = tuple[int, str, list[str] | None, str | None]
"""A record: its number (the header is 1), its text, its cells (``None`` when the csv
module cannot read it) and, then, why."""


def csv_records(text: str) -> Iterator[CsvRecord]:
    """The records of the CSV ``text`` (without a byte-order mark), each with its exact
    text: joined, the texts are ``text``.  A record the csv module cannot read ends the
    file (where the next one starts is unknown): it is given with every line after it as
    its text and no cells."""
    tap = _Tap(text)
    rows = csv.reader(tap)
    number = 1
    while True:
        try:
            row = next(rows)
        except StopIteration:
            rest = tap.rest()
            if rest:  # a final record the reader dropped (it never drops one; kept if it did)
                yield number, rest, None, "not read as a CSV record"
            return
        except csv.Error as exc:
            yield number, tap.rest(), None, f"not readable as CSV ({exc}); the lines after it are not read"
            return
        yield number, tap.take(), row, None
        number += 1


def csv_text_reads_as(text: str, header: Sequence[str], cells: Sequence[str]) -> bool:
    """Whether the record ``text`` reads, as pandas reads aiter's files (a short record's
    missing cells empty), as the record ``cells`` of ``header``: cell by cell the same
    value (``7.780`` is ``7.78``; ``1`` is not ``1.0``)."""
    try:
        rows = list(csv.reader(io.StringIO(text, newline="")))
    except csv.Error:
        return False
    if len(rows) != 1 or len(rows[0]) > len(header) or len(cells) != len(header):
        return False
    read = rows[0] + [""] * (len(header) - len(rows[0]))
    return all(canonical_text(cell_value(a)) == canonical_text(cell_value(b)) for a, b in zip(read, cells, strict=True))


def json_members(text: str, file: str) -> tuple[str, list[tuple[str, str]], str]:
    """The JSON object ``text`` cut into its head (up to and with ``{``), each member's
    name and text, and its tail; :class:`ArtifactError` naming ``file`` if it is not one
    JSON object."""
    decoder = json.JSONDecoder()

    def bad(why: str) -> ArtifactError:
        return ArtifactError(file, [FieldProblem("", f"not one JSON object: {why}")])

    pos = _WS.match(text, 0).end()  # type: ignore[union-attr]
    if text[pos:pos + 1] != "{":
        raise bad("no {")
    head, pos = text[:pos + 1], pos + 1
    members: list[tuple[str, str]] = []
    after = _WS.match(text, pos).end()  # type: ignore[union-attr]
    if text[after:after + 1] == "}":
        return head, members, text[pos:]
    try:
        while True:
            start = pos
            pos = _WS.match(text, pos).end()  # type: ignore[union-attr]
            name, pos = decoder.raw_decode(text, pos)
            if not isinstance(name, str):
                raise bad(f"a member name at {pos} is not a string")
            pos = _WS.match(text, pos).end()  # type: ignore[union-attr]
            if text[pos:pos + 1] != ":":
                raise bad(f"no : at {pos}")
            pos = _WS.match(text, pos + 1).end()  # type: ignore[union-attr]
            _, end = decoder.raw_decode(text, pos)
            pos = _WS.match(text, end).end()  # type: ignore[union-attr]
            if text[pos:pos + 1] == ",":
                members.append((name, text[start:pos]))
                pos += 1
            elif text[pos:pos + 1] == "}":
                members.append((name, text[start:end]))
                return head, members, text[end:]
            else:
                raise bad(f"no , or }} at {pos}")
    except json.JSONDecodeError as exc:
        raise bad(str(exc)) from None


def json_member_text(name: str, value: Any, indent: int) -> str:
    """The member as ``json.dumps`` writes it inside an object indented by ``indent``,
    from the newline before it to the end of its value."""
    return json.dumps({name: value}, indent=indent)[1:-2]


def json_text_reads_as(text: str, name: str, value: Any) -> bool:
    """Whether the member ``text`` reads as the member ``name``: ``value`` (the same
    values and types; the order of an object's members aside)."""
    try:
        read = json.loads("{" + text + "}")
    except ValueError:
        return False
    return isinstance(read, dict) and list(read) == [name] and canonical_text(read[name]) == canonical_text(value)
