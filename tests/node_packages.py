"""The Node packages the tests run, each folder installed exactly as its lockfile pins, and the TypeScript server built.

tests/run.py makes them before the tests start, as it makes the Python environments; a test that needs one calls
the same functions, which do nothing when the folder is up to date, so a bare pytest works too. pytest's workers
share the folders: each step holds the folder's lock.
"""

import fcntl
import os
import subprocess
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TYPESCRIPT = ROOT / "typescript"  # the TypeScript server, and the package it is built on
PACKAGE = TYPESCRIPT / "packages" / "mcp-idempotency"
INTEROP = ROOT / "tests" / "interop"  # the TypeScript SDKs' clients
EXTENSION = ROOT / "extension"  # the extension's types, tsc and the JSON Schema generator


@contextmanager
def one_at_a_time(folder: Path):
    """Hold `folder`'s lock while the block runs."""
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)  # releases the lock


def npm_installed(folder: Path) -> None:
    """`npm ci` in `folder`, exactly what its lockfile pins, unless node_modules was installed from this lockfile
    already: npm writes node_modules/.package-lock.json as it installs, so a lockfile changed since is newer."""
    installed = folder / "node_modules" / ".package-lock.json"
    with one_at_a_time(folder):
        if not installed.exists() or installed.stat().st_mtime < (folder / "package-lock.json").stat().st_mtime:
            subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--silent"], cwd=folder, check=True, timeout=600)


def typescript_built() -> None:
    """The TypeScript server compiled from typescript/server.ts, as tests/interop/run.sh does: its packages installed,
    then `npm run build` (the mcp-idempotency package, then the server) unless dist/ is newer than every file it is
    built from."""
    npm_installed(TYPESCRIPT)
    built = TYPESCRIPT / "dist" / "server.js"
    sources = [TYPESCRIPT / name for name in ("server.ts", "tsconfig.json", "package-lock.json")]
    sources += [path for path in PACKAGE.glob("*") if path.is_file()]
    sources += [path for folder in ("src", "examples") for path in (PACKAGE / folder).glob("*.ts")]
    with one_at_a_time(TYPESCRIPT):
        if not built.exists() or built.stat().st_mtime < max(source.stat().st_mtime for source in sources):
            subprocess.run(["npm", "run", "--silent", "build"], cwd=TYPESCRIPT, check=True, timeout=300)
