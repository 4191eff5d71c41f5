"""Evaluating: rules decide, over each stream of values in step order, whether an alert fires.

Pure decisions (`rules`, `detectors`, `state`, `plans`, `evaluation`) over states held in memory
(`book`), with the two pieces of I/O evaluation needs: whose turn it is to evaluate a stream and
where its states live (`turns`), and a stream's stored steps read back (`history`, `replay`).
`streams` keeps each stream in step order whatever order its steps arrive in. It knows nothing
of recording, delivery or configuration.
"""
