"""The image's HEALTHCHECK: `web` is healthy while it answers GET /healthz on $PORT; any
other command (`worker`, `clock`, `console`, `migrate`) has no health URL and is healthy
while it runs (docs/processes.md). The command is read from PID 1's arguments, which are
`webhooks <command> ...`, behind an init's own (`tini -- webhooks web`) when one runs."""

import os
import sys
import urllib.request
from pathlib import Path


def command() -> str | None:
    words = Path("/proc/1/cmdline").read_bytes().split(b"\0")
    names = [Path(word.decode(errors="replace")).name for word in words]
    if "webhooks" not in names:
        return None
    following = names[names.index("webhooks") + 1:]
    return following[0] if following else "web"


def main() -> int:
    if command() != "web":
        return 0
    url = f"http://127.0.0.1:{os.environ.get('PORT') or '8000'}/healthz"
    try:
        with urllib.request.urlopen(url, timeout=3) as response:
            return 0 if response.status == 200 else 1
    except OSError as error:
        print(f"{url}: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
