"""Writing: the ingest path and what keeps the stored values in shape.

A batch is committed (`commits`) through `ingest` into columnar appends (`appends`,
`point_columns`, `pg_points`), with the heads, runs, notes and exemplars it names kept up to date;
`compaction`, `rollup_upsert` and `retention` move hot values into rollups and let old ones go.
It never imports the reading room.
"""
