"""Benchmarks of the real processes: `python -m benchmarks` (see docs/benchmarks.md).

Each scenario starts the Procfile's processes (`webhooks web`, `webhooks worker`) against a
private database, drives them from outside, and compares them with pgbench running the
same SQL at the same concurrency in the same run (ingest.sql, worker.sql).
"""
