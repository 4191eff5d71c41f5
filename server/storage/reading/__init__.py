"""Reading: stored values read back for the read side, in bounded reads.

Series and their downsampled buckets (`series`), aggregates across runs (`aggregates`,
`hardware`), the runs list a page at a time (`run_pages`, `run_conditions`, `trends`), a run's
values step by step (`stored_steps`), exports (`exports`) and each project's reference run
(`references`). It may use the writing room's layout (rollup levels, the runs table's rows).
"""
