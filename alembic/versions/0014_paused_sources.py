"""paused sources: `paused_providers` gains `source`, '*' meaning every source of the
provider

A pause names a provider and a source, or the provider as a whole ('*', which also covers
the sources configured after it). One table, keyed (provider, source): DUE stays one
anti-join on its primary key (`p.provider = jobs.provider AND p.source IN ('*',
jobs.source)`), and the large tables (jobs, webhook_events) are not touched at all.

Both steps take an instant of ACCESS EXCLUSIVE on paused_providers only, a table of one
row per pause; no row of jobs is read or locked:

1. ADD COLUMN source text NOT NULL DEFAULT '*': a constant default is metadata only (no
   rewrite); the existing rows, pauses of a whole provider, read as '*'.
2. The primary key replaced by (provider, source) in one ALTER TABLE.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-02 05:00:00.000000
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute("ALTER TABLE paused_providers ADD COLUMN source text NOT NULL DEFAULT '*'")
    op.execute("ALTER TABLE paused_providers DROP CONSTRAINT pk_paused_providers, "
               "ADD CONSTRAINT pk_paused_providers PRIMARY KEY (provider, source)")


def downgrade() -> None:
    # A pause of one source becomes a pause of its provider: nothing paused runs early.
    op.execute("DELETE FROM paused_providers a USING paused_providers b WHERE "
               "a.provider = b.provider AND (a.source, a.paused_at) > (b.source, b.paused_at)")
    op.execute("ALTER TABLE paused_providers DROP CONSTRAINT pk_paused_providers, "
               "ADD CONSTRAINT pk_paused_providers PRIMARY KEY (provider)")
    op.execute("ALTER TABLE paused_providers DROP COLUMN source")
