"""The text module: cutters never over their limit (the text whole when it fits), and
printable text (no control character, no lone surrogate)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aicr_runner.text import ELLIPSIS, cut, cut_bytes, one_line, printable


@pytest.mark.parametrize(
    ("text", "limit", "expected"),
    [
        ("abcdef", 6, "abcdef"),
        ("abcdefg", 6, "abc..."),
        ("", 0, ""),
        ("abcdef", 3, "abc"),
        ("abcdef", 0, ""),
        ("abcdef", -1, ""),
    ],
)
def test_cut_examples(text: str, limit: int, expected: str) -> None:
    assert cut(text, limit) == expected


@given(text=st.text(max_size=50), limit=st.integers(min_value=0, max_value=60))
def test_cut_never_exceeds_its_limit_and_keeps_the_start(text: str, limit: int) -> None:
    result = cut(text, limit)
    assert len(result) <= limit
    if len(text) <= limit:
        assert result == text
    else:
        kept = result.removesuffix(ELLIPSIS) if limit > len(ELLIPSIS) else result
        assert text.startswith(kept)
        assert len(result) == limit


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("ok\ttab\nline", "ok\ttab\nline"),
        ("\x1b]0;title\x07\x1b[2J", "\ufffd]0;title\ufffd\ufffd[2J"),
        ("bad \udc80 byte", "bad \ufffd byte"),
        ("cr\rdel\x7fc1\x9b", "cr\ufffddel\ufffdc1\ufffd"),
    ],
)
def test_printable_replaces_control_characters_and_lone_surrogates(text: str, expected: str) -> None:
    assert printable(text) == expected
    printable(text).encode("utf-8")  # never raises


@given(text=st.text(max_size=80), limit=st.integers(min_value=0, max_value=90))
def test_one_line_is_one_printable_line_within_its_limit(text: str, limit: int) -> None:
    line = one_line(text, limit)
    assert len(line) <= limit
    assert not re.search("[\x00-\x1f\x7f-\x9f\ud800-\udfff\u2028\u2029]", line)


@given(text=st.text(max_size=80).map(printable), limit=st.integers(min_value=0, max_value=200))
def test_cut_bytes_never_exceeds_its_byte_limit_and_keeps_the_start(text: str, limit: int) -> None:
    result = cut_bytes(text, limit)
    assert len(result.encode()) <= limit
    if len(text.encode()) <= limit:
        assert result == text
    else:
        assert text.startswith(result.removesuffix(ELLIPSIS))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("plain ascii", "plain ascii"),
        ("a\nb\rc", "a\nb\ufffdc"),
        ("\x1b[2J\x1b]0;title\x07", "\ufffd[2J\ufffd]0;title\ufffd"),
        ("r\u202eevil", "r\ufffdevil"),
        ("lone \ud800 surrogate", "lone \ufffd surrogate"),
        ("line\u2028sep", "line\ufffdsep"),
        ("no\xa0break", "no\ufffdbreak"),
        ("ünïcödé ✓", "ünïcödé ✓"),
    ],
)
def test_printable_replaces_what_could_move_the_cursor_or_is_not_unicode(text: str, expected: str) -> None:
    assert printable(text) == expected


@given(text=st.text(alphabet=st.characters(), max_size=80), limit=st.integers(min_value=0, max_value=60))
def test_one_line_is_printable_and_bounded_whatever_the_characters(text: str, limit: int) -> None:
    result = one_line(text, limit)
    assert len(result) <= limit
    assert result.isprintable()
    result.encode("utf-8")  # valid Unicode: a lone surrogate would raise here
