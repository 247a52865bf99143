"""mcp-idempotency-store: what an operator does to a store from the command line.

    mcp-idempotency-store upgrade URL              bring a store of schema version 2 or 3 to version 4 in place
    mcp-idempotency-store forget URL PART [PART]   delete every record of one principal
    python -m mcp_idempotency.stores.command ...   the same

A server refuses a store of version 2 or 3 at start, in one line that names `upgrade`. The
upgrade keeps every record, each with its principal (read from its key, from version 2),
counts each principal's records, and keeps every other table as it is (the demo's ledger);
a store of version 4 already is left alone. Stop the previous version's servers first: a
version 2 server's claims, which name no principal, fail on the upgraded store, so they
answer idempotency_store_unavailable (never a run without the record).

`forget` deletes one principal's records, completed and running, before their window
ends: an account closed, a data-protection request. The principal is named by its parts
as the layer finds them: with OAuth the issuer and the subject (`forget URL
https://issuer.example alice`), without authorisation `"one tenant"`. Its keys then run
anew; no other principal's record is touched. A call of theirs running meanwhile finds
its record gone, so its completion is fenced off: its effect in the store rolls
back, its client is told in progress, and its retry runs anew.

Each command says what it did in one line; a store it cannot work on ends it with one
line on stderr and exit status 1.
"""

import argparse
import os
import sys

import anyio

from ..rules import principal_name
from . import SCHEMA_VERSION, UPGRADABLE, Limits, OtherSchema, open_store

__all__ = ["main"]


async def upgrade(url: str) -> int:
    """Upgrade the store `url` names in place; the version it held."""
    if url.startswith("sqlite:"):
        from . import sqlite

        return sqlite.upgrade(url.removeprefix("sqlite:"))
    if url.startswith(("postgresql:", "postgres:")):
        from . import postgres

        return await postgres.upgrade(url)
    raise ValueError("only sqlite:PATH and postgresql://... stores have a schema to upgrade")


async def forget(url: str, principal: tuple[str, ...]) -> int:
    """Delete every record of `principal` in the store `url` names; how many there were."""
    if url == "memory":
        raise ValueError("a memory store lives in its server's process: restarting the server forgets everything")
    if url.startswith("sqlite:") and not os.path.exists(url.removeprefix("sqlite:")):  # opening would make one
        raise FileNotFoundError(f"no such file: {url.removeprefix('sqlite:')}")
    async with open_store(url, Limits()) as store:
        return await store.forget(principal_name(principal))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="mcp-idempotency-store", description=(__doc__ or "").splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    upgrading = commands.add_parser(
        "upgrade",
        help=f"bring a store of schema version {' or '.join(map(str, UPGRADABLE))} to {SCHEMA_VERSION} in place, "
        "every record kept",
    )
    upgrading.add_argument("url", metavar="URL", help="sqlite:PATH or postgresql://...")
    forgetting = commands.add_parser("forget", help="delete every record of one principal, completed and running")
    forgetting.add_argument("url", metavar="URL", help="sqlite:PATH or postgresql://...")
    forgetting.add_argument(
        "principal", nargs="+", metavar="PART", help='the principal: ISSUER SUBJECT with OAuth, else "one tenant"'
    )
    settings = parser.parse_args(argv)
    doing = "upgrade" if settings.command == "upgrade" else "forget a principal in"
    try:
        if settings.command == "forget":
            forgotten = anyio.run(forget, settings.url, tuple(settings.principal))
        else:
            found = anyio.run(upgrade, settings.url)
    except OtherSchema as error:  # its message says what to do: the one line as it is
        sys.exit(f"cannot {doing} the store {settings.url}: {error}")
    except Exception as error:
        sys.exit(f"cannot {doing} the store {settings.url}: {type(error).__name__}: {error}".splitlines()[0])
    if settings.command == "forget":
        print(f"forgot {forgotten} record(s) of {principal_name(tuple(settings.principal))} in {settings.url}")
    elif found != SCHEMA_VERSION:
        print(
            f"upgraded {settings.url} in place from schema version {found} to {SCHEMA_VERSION}: "
            "every record and every other table kept"
        )
    else:
        print(f"{settings.url} holds schema version {SCHEMA_VERSION} already: nothing to do")


if __name__ == "__main__":
    main()
