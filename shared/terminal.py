"""Text that came from data, made safe to print on a terminal or in a text log line.

Event ids, types, emails, outcomes and errors are chosen by senders (a Standard Webhooks
sender relays its users' text; a handler's error quotes a payload). Printed raw, their
control characters drive the terminal (ESC sequences set the title, clear the screen,
make links; BEL; 8-bit C1 controls such as U+009B, the CSI of some terminals) or forge
lines (a newline starts a fake table row or log line). `visible` writes each of them,
and the bidirectional overrides that reorder what is shown, as a Python-style escape
(`\\x1b`, `\\n`, `\\u202e`); every other character is left as it is.
"""

from __future__ import annotations

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_CONTROLS = [*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0)]
# Line and paragraph separators, and the bidi embeddings, overrides and isolates.
_FORMATS = [0x2028, 0x2029, *range(0x202A, 0x202F), *range(0x2066, 0x206A)]


def _escape(code: int) -> str:
    char = chr(code)
    if char in _NAMED:
        return _NAMED[char]
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


_TABLE = {code: _escape(code) for code in (*_CONTROLS, *_FORMATS)}


def visible(value: object) -> str:
    """str(value) with every control character and bidi override escaped."""
    return str(value).translate(_TABLE)


# JSON text (json.dumps already writes C0 controls as \u00XX) shown to a person, on a page
# or a terminal: the C1 controls and the format characters above as \uXXXX too, which a
# JSON reader reads back as the same string.
_JSON_TABLE = {code: f"\\u{code:04x}" for code in (*range(0x7F, 0xA0), *_FORMATS)}


def visible_json(text: str) -> str:
    """JSON text with the characters that reorder or drive a display escaped."""
    return text.translate(_JSON_TABLE)
