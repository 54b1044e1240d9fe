"""An app module that fails to import, as a typo in a team's module would."""

RATE = 1 / 0
