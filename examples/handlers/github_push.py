"""A complete user handler: count GitHub pushes per repository, exactly once per delivery.

Run the workers with WEBHOOK_HANDLERS=examples.handlers.github_push (from the repository
root) and send examples/github/push.json with:

    webhooks send github examples/github/push.json --header "X-GitHub-Event: push"

The handler writes through ctx.conn, inside the job's transaction, so its row and the
job's `done` mark commit together; the UNIQUE delivery id makes a replay harmless too.
"""

from __future__ import annotations

import sqlalchemy as sa

from webhooks import JobContext, handler

CREATE = sa.text("""
    CREATE TABLE IF NOT EXISTS example_github_pushes (
        delivery_id text PRIMARY KEY,
        repository text NOT NULL,
        pushed_at timestamptz NOT NULL DEFAULT now()
    )
""")
INSERT = sa.text("""
    INSERT INTO example_github_pushes (delivery_id, repository) VALUES (:delivery, :repo)
    ON CONFLICT (delivery_id) DO NOTHING
""")


@handler("github", "push")
def record_push(ctx: JobContext) -> str:
    repository = ctx.payload["repository"]["full_name"]
    ctx.conn.execute(CREATE)  # an example: in your app, create the table with a migration
    ctx.conn.execute(INSERT, {"delivery": ctx.event_id, "repo": repository})
    return f"push to {repository} recorded"
