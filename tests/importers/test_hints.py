"""`--framework auto` as an import says it: the framework told from a run's names, the
frameworks tied when the names do not tell one, or that no framework's names were found; a
framework given by name is taken as it is."""

from __future__ import annotations

from server.importers.hints import resolve_framework


def test_auto_names_the_framework_its_names_tell() -> None:
    names = ["sampling/sampling_logp_difference/mean", "loss", "my_metric"]
    assert resolve_framework(names, "auto") == ("trl", "framework trl (told from its names)")


def test_auto_names_the_frameworks_that_tie_and_asks_for_one() -> None:
    found, note = resolve_framework(["loss", "reward_std"], "auto")
    assert found is None
    assert note == (
        "framework not told apart (trl or ms-swift know the same names): names kept as they "
        "are; pass --framework"
    )


def test_auto_with_no_frameworks_names_keeps_them_as_they_are() -> None:
    found, note = resolve_framework(["my_metric", "timing/gen"], "auto")
    assert (found, note) == (None, "no framework's names found: names kept as they are")


def test_a_framework_given_by_name_is_taken_without_a_note() -> None:
    assert resolve_framework(["sampling/sampling_logp_difference/mean"], "verl") == ("verl", "")
    assert resolve_framework(["loss"], None) == (None, "")
