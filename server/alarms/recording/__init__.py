"""Recording: what evaluation decided becomes alerts, incidents and outbox messages.

`recorder` opens, ends, corrects or withdraws alerts in the transaction that evaluated them;
`reconcile` brings a stream's alerts in line with evaluating it again; `incidents` groups a run's
alerts that fire close together; `messages` writes the notices each receiver is owed into the
outbox. It reads what evaluation hands it and formats bodies with the delivering stage's
payloads; nothing here sends anything.
"""
