"""Text shown to a person cannot steer the terminal or forge lines."""

from hypothesis import given
from hypothesis import strategies as st

from dcpctl.safetext import brief, shown, shown_bytes


def test_terminal_controls_are_escaped() -> None:
    assert shown("\x1b]0;owned\x07") == "\\x1b]0;owned\\x07"
    assert shown("\x1b[2J") == "\\x1b[2J"
    assert shown("line\nforged") == "line\\nforged"
    assert shown("\u202eevil") == "\\u202eevil"
    assert shown("\x9b") == "\\x9b"  # the one-byte CSI of C1


def test_plain_text_is_unchanged() -> None:
    assert shown("airline_10 héllo 東京") == "airline_10 héllo 東京"


def test_backslashes_are_doubled_so_escapes_cannot_be_forged() -> None:
    assert shown("a\\nb") == "a\\\\nb"


def test_bytes_that_are_not_utf8_are_escaped() -> None:
    assert shown_bytes(b"k\xff\x1b") == "k\\xff\\x1b"


@given(st.text())
def test_nothing_shown_holds_a_control_character(text: str) -> None:
    out = shown(text)
    assert all(ch.isprintable() for ch in out)
    assert "\n" not in out
    assert not any(0x2028 <= ord(ch) <= 0x202E or 0x2066 <= ord(ch) <= 0x2069 for ch in out)


def test_a_long_bad_value_is_quoted_briefly_with_its_length() -> None:
    quoted = brief("x" * 10_000)
    assert len(quoted) < 80
    assert quoted.endswith("(10000 chars)")
    assert brief(5) == "5"


def test_a_deeply_nested_value_is_quoted_without_recursing() -> None:
    deep: object = 1
    for _ in range(5000):
        deep = [deep]
    assert len(brief(deep)) <= 60


def test_a_value_quoted_from_json_is_in_json_s_words() -> None:
    """encode said 'got None' and 'got True' of a record's null and true."""
    assert brief(None) == "null"
    assert brief([True, {"a": False}]) == "[true, {'a': false}]"
    assert brief(7) == "7"
