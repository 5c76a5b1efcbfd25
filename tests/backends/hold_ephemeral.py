"""Child process for the SIGKILL test: hold an ephemeral node until killed.

usage: python hold_ephemeral.py URL PATH SESSION_TIMEOUT_MS
Prints "ready" once the node exists, then blocks reading stdin.
"""

import asyncio
import sys

from replog.coord_backends import open_store


async def main(url: str, path: str, session_timeout_ms: int) -> None:
    store = open_store(url, session_timeout_ms=session_timeout_ms)
    await store.start()
    await store.create(path, b"held", ephemeral=True)
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
