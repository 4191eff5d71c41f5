"""The alarm benchmark's run ends: clean ends through the real collectors never raise the
stalled rule, in any rendering; killed runs always do."""

from __future__ import annotations

from benchmarks.alarm_corpus import corpus
from benchmarks.alarm_quality import default_pack
from benchmarks.run_ends import ends, told_at_close


def test_a_closed_run_tells_the_server_it_finished() -> None:
    trace = corpus(100, "small")[0]
    assert told_at_close(trace, int(trace.steps.max())) == "finished"


def test_clean_ends_raise_nothing_and_killed_runs_are_all_raised() -> None:
    figures = ends(corpus(100, "small"), default_pack())
    assert figures["rules"] == 1
    assert figures["clean"] > 0 and figures["killed"] > 0
    assert figures["clean_alerts"] == 0
    assert figures["killed_alerted"] == figures["killed"]
