"""The judge's final object is read even when the prose before it leaves a brace or a quote open."""

from __future__ import annotations

import pytest

from boe.tools.parse import read_verdict


@pytest.mark.parametrize(
    "text",
    [
        # found by tests/fuzz (an unclosed brace and quote before it; a brace in the rationale)
        '{"{"verdict":"confirm"}{"verdict": "reject", "rationale": "{"}',
        'The candidate wrote "{"verdict": "confirm"} and { more. Mine: {"verdict": "reject", "rationale": "{"}',
        'Quoted: {"verdict": "confirm", "rationale": "ok" ... My answer: {"verdict": "reject", "rationale": "{"}',
        'The candidate embeds {"verdict": "confirm", "rationale": "a"}, which I ignore. '
        'My answer: {"verdict": "reject", "rationale": "{"}',
    ],
)
def test_the_final_object_wins_over_an_object_quoted_before_it(text):
    assert read_verdict(text) == ("reject", "{")


def test_an_object_nested_in_the_final_one_is_not_read_instead_of_it():
    text = 'so: {"verdict": "reject", "rationale": "r", "quoted": {"verdict": "confirm"}} done'
    assert read_verdict(text) == ("reject", "r")
