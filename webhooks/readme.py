"""README.md's generated tables: the providers (shared.providers) and each topic's
environment variables (shared.settings, webhooks.console.settings), between the markers
`<!-- generated: NAME -->` and `<!-- end generated -->`.

`python -m webhooks.readme` rewrites them; `--check` exits 1 naming each table that
differs from its declarations (.ci/run runs it; tests/unit/test_declarations.py checks
the same).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path

from webhooks.console import settings as console_settings
from webhooks.shared import providers, settings
from webhooks.shared.variables import Topic

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCK = re.compile(r"(<!-- generated: (?P<name>[a-z ]+) -->\n)(?P<table>.*?)"
                   r"(\n<!-- end generated -->)", re.S)


def _variables(topic: Topic) -> Callable[[], str]:
    if topic is Topic.CONSOLE:
        return console_settings.markdown_table
    return partial(settings.markdown_table, topic)


TABLES: dict[str, Callable[[], str]] = {
    "providers": providers.markdown_table,
    **{f"variables {topic}": _variables(topic) for topic in Topic},
}


def generated(text: str) -> str:
    """`text` with every generated table as its declarations say."""
    return BLOCK.sub(lambda match: match[1] + TABLES[match["name"]]() + match[4], text)


def stale(text: str) -> list[str]:
    """The names of the tables that differ from their declarations, or are missing."""
    found = {match["name"]: match["table"] for match in BLOCK.finditer(text)}
    return [name for name, table in TABLES.items() if found.get(name) != table()]


def main(argv: list[str]) -> int:
    text = README.read_text()
    if argv[1:] == ["--check"]:
        for name in stale(text):
            print(f"README.md: the table {name!r} differs from its declarations; run "
                  "`python -m webhooks.readme`", file=sys.stderr)
        return 1 if stale(text) else 0
    README.write_text(generated(text))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
