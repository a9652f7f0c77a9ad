"""Text the `squall` command did not write itself, made safe to print on a terminal.

Container output, S3 key names, reasons and messages a job's pods produced and a model
server's error text can carry escape sequences: set the window title, clear the screen,
write the clipboard (OSC 52), hide links. Every place the command prints such text
passes it through `printable` first, so a terminal shows the bytes instead of obeying
them.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence

# C0 controls but tab and newline, DEL, and the C1 controls (0x80-0x9f): 0x9b is CSI
# and 0x9d OSC on terminals that take 8-bit controls.
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# Characters that change how the text around them is laid out or read without being seen:
# bidirectional overrides and isolates (the "Trojan Source" set), and the line and
# paragraph separators that some terminals honour as line breaks.
_INVISIBLE = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u2028\u2029")


def _escaped(char: str) -> str:
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}"


def printable(text: str, *, newlines: bool = True) -> str:
    r"""`text` with every control character shown as an escape (``\x1b``, ``\x9b``, ``\u202e``).

    Tab stays, and newline stays where `newlines` is true (a log line's own breaks); with
    `newlines` false (one field in a table row) newline and carriage return are escaped too.
    """
    if text.isascii() and text.isprintable():
        return text
    out: list[str] = []
    for char in text:
        if char == "\t" or (char == "\n" and newlines):
            out.append(char)
        elif (
            char == "\n" or _CONTROLS.match(char) or char in _INVISIBLE or unicodedata.category(char) == "Cs"
        ):
            out.append(_escaped(char))
        else:
            out.append(char)
    return "".join(out)


def one_line(value: object) -> str:
    """A value from a record in one line of a table or a sentence, control characters escaped."""
    return printable(str(value), newlines=False)


def print_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """Columns padded to their widest cell; the last one, free text, runs on."""
    table = [list(header), *(list(row) for row in rows)]
    widths = [max(len(line[i]) for line in table) for i in range(len(header) - 1)]
    for *cells, last in table:
        print("  ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True)), last, sep="  ")
