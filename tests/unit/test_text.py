"""The one text cutter: never over its limit, the text whole when it fits."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aicr_runner.text import ELLIPSIS, cut


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
