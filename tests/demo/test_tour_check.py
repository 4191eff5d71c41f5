"""The tour's reading of a page can fail: empty charts and placeholder words are found."""

from __future__ import annotations

from tests.demo.tour import problems, tour_paths


def test_an_empty_chart_and_placeholder_words_are_problems() -> None:
    snapshot = {"text": "k3 None\\nlatest NaN, undefined", "plots": [12, 0]}
    assert problems("/x", snapshot) == [
        "/x: chart 1 drawn with no data",
        "/x: the text says 'None'",
        "/x: the text says 'NaN'",
        "/x: the text says 'undefined'",
    ]


def test_words_that_merely_contain_a_placeholder_are_not_problems() -> None:
    text = "Nonexistent runs: none yet. NaNs stored: 3 (shown as gaps)"
    snapshot = {"text": text, "plots": [4, -1]}  # −1: an empty state saying what to do
    assert problems("/x", snapshot) == []


def test_the_tour_opens_every_page_of_the_readme() -> None:
    paths = tour_paths(["a", "b"], "a")
    assert paths[0] == "/"
    assert [p.split("?")[0] for p in paths] == [
        "/",
        "/run",
        "/run",
        "/compare",
        "/buckets",
        "/hardware",
        "/parity",
    ]
    assert "ref=a" in paths[3]
