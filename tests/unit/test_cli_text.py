"""The one function the `squall` command prints text it did not write through."""

from __future__ import annotations

import pytest

from squall.cli.text import printable


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("\x1b]0;pwned\x07", "\\x1b]0;pwned\\x07"),  # window title
        ("\x1b[2J\x1b[H", "\\x1b[2J\\x1b[H"),  # clear screen
        ("\x1b]52;c;ZXZpbA==\x07", "\\x1b]52;c;ZXZpbA==\\x07"),  # clipboard write (OSC 52)
        ("\x1b]8;;http://evil\x1b\\x\x1b]8;;\x1b\\", "\\x1b]8;;http://evil\\x1b\\x\\x1b]8;;\\x1b\\"),  # link
        ("\x9b31m8-bit CSI", "\\x9b31m8-bit CSI"),
        ("a\rb", "a\\x0db"),
        ("admin\u202etxt.exe", "admin\\u202etxt.exe"),
        ("\x7f", "\\x7f"),
    ],
)
def test_controls_are_shown_not_obeyed(raw: str, shown: str) -> None:
    assert printable(raw) == shown
    assert "\x1b" not in printable(raw) and "\x9b" not in printable(raw)


def test_tab_newline_and_plain_unicode_stay() -> None:
    assert printable("epoch 1\tloss 0.5\nepoch 2 ✓ 损失") == "epoch 1\tloss 0.5\nepoch 2 ✓ 损失"


def test_a_field_escapes_its_line_breaks() -> None:
    assert printable("two\nlines\r", newlines=False) == "two\\x0alines\\x0d"


def test_a_command_error_carrying_outside_text_is_printed_escaped(capsys: pytest.CaptureFixture[str]) -> None:
    import argparse

    from squall.cli.errors import CommandError, reported
    from squall.core.errors import PermanentError

    @reported
    def refused(_args: argparse.Namespace) -> int:
        raise CommandError("no job named '\x1b]0;pwned\x07'")

    @reported
    def failed(_args: argparse.Namespace) -> int:
        raise PermanentError("the server said \x1b[2J")

    assert refused(argparse.Namespace()) == 2
    assert failed(argparse.Namespace()) == 1
    err = capsys.readouterr().err
    assert "\x1b" not in err
    assert "no job named '\\x1b]0;pwned\\x07'" in err and "the server said \\x1b[2J" in err
