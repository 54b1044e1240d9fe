"""Small apps of the tests' own, each a module as a team's app is
(tests/integration/test_apps.py)."""
