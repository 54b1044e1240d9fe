"""Dramatiq workers: job processing, outbox dispatch and the clock."""
