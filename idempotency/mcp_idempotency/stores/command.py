"""mcp-idempotency-store: what an operator does to a store from the command line.

    mcp-idempotency-store upgrade URL     bring a store of schema version 2 to version 3 in place
    python -m mcp_idempotency.stores.command upgrade URL     the same

A server refuses a store of version 2 at start, in one line that names this command.
The upgrade keeps every record, and every other table as it is (the demo's ledger);
it may run while servers of the previous version still serve the store, and a store
of version 3 already is left alone. It says what it did in one line; a store it
cannot upgrade ends it with one line on stderr and exit status 1.
"""

import argparse
import sys

import anyio

from . import SCHEMA_VERSION, UPGRADABLE, OtherSchema


async def upgrade(url: str) -> bool:
    """Upgrade the store `url` names in place; False if it was at this version already."""
    if url.startswith("sqlite:"):
        from . import sqlite

        return sqlite.upgrade(url.removeprefix("sqlite:"))
    if url.startswith(("postgresql:", "postgres:")):
        from . import postgres

        return await postgres.upgrade(url)
    raise ValueError("only sqlite:PATH and postgresql://... stores have a schema to upgrade")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="mcp-idempotency-store", description=(__doc__ or "").splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    upgrading = commands.add_parser(
        "upgrade", help=f"bring a store of schema version {UPGRADABLE} to {SCHEMA_VERSION} in place, every record kept"
    )
    upgrading.add_argument("url", metavar="URL", help="sqlite:PATH or postgresql://...")
    settings = parser.parse_args(argv)
    try:
        upgraded = anyio.run(upgrade, settings.url)
    except OtherSchema as error:  # its message says what to do: the one line as it is
        sys.exit(f"cannot upgrade the store {settings.url}: {error}")
    except Exception as error:
        sys.exit(f"cannot upgrade the store {settings.url}: {type(error).__name__}: {error}".splitlines()[0])
    if upgraded:
        print(
            f"upgraded {settings.url} in place from schema version {UPGRADABLE} to {SCHEMA_VERSION}: "
            "every record and every other table kept"
        )
    else:
        print(f"{settings.url} holds schema version {SCHEMA_VERSION} already: nothing to do")


if __name__ == "__main__":
    main()
