"""The core every process imports, and which imports none of them: settings, db, models
(with the status vocabularies), queries, errors, logs, metrics, wake-ups, the providers'
signature schemes, and the operations several entry points share (recording an event,
replaying jobs, retention, stats)."""
