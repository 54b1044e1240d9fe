"""The overview's Pause and Resume buttons, one pair per source, through shared.pausing
(the operation `webhooks pause` and `webhooks resume` run).

Pause holds that source alone; its provider's other sources run on. Resume on a source its
provider holds as a whole (`webhooks pause stripe`) resumes the provider, every source of
it: the page says so on the button, so nothing resumes that the operator did not see. After
a resume the workers are woken for the due jobs (best effort: the clock's sweeper also
finds them)."""

from __future__ import annotations

from flask import Blueprint, abort, redirect, url_for
from werkzeug.wrappers import Response

from webhooks.console.state import current
from webhooks.shared import pausing
from webhooks.shared.providers import PROVIDERS
from webhooks.shared.sources import NAME


def register(blueprint: Blueprint) -> None:
    blueprint.add_url_rule("/sources/<provider>/<source>/pause", "pause", pause,
                           methods=["POST"])
    blueprint.add_url_rule("/sources/<provider>/<source>/resume", "resume", resume,
                           methods=["POST"])
    blueprint.add_url_rule("/sources/<provider>/resume", "resume_provider", resume,
                           methods=["POST"])


def _check(provider: str, source: str | None) -> None:
    """A provider this code knows and a well-formed source name: no pause of a typo."""
    if provider not in PROVIDERS or not (source in (None, provider) or NAME.fullmatch(source)):
        abort(404, f"No source {provider}/{source} to pause or resume.")


def pause(provider: str, source: str) -> Response:
    _check(provider, source)
    newly = pausing.pause(current().engine, provider, source)
    return redirect(url_for(".overview", notice="paused" if newly else "already_paused"), 303)


def resume(provider: str, source: str | None = None) -> Response:
    _check(provider, source)
    console = current()
    due = pausing.resume(console.engine, provider, source)
    if due is None:
        return redirect(url_for(".overview", notice="not_paused"), 303)
    console.wake_due(due)
    return redirect(url_for(".overview", notice="resumed", n=due), 303)
