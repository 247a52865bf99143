"""A PostgreSQL primary and its streaming replica for the failover tests, through tests/replica.sh.

`Cluster(mode)` starts both on 127.0.0.1 (asynchronous, or synchronous with the replica
named in synchronous_standby_names), in a folder of their own; the tests then cut the
replica off, pause its replay, stop the primary abruptly, promote the replica and start
the dead primary again alone, each through replica.sh or one SQL statement. `stop()`
ends whatever still runs and deletes the folder.
"""

import contextlib
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from wire import free_port

REPLICA_SH = Path(__file__).resolve().parent / "replica.sh"


def replica_sh(*args) -> str:
    """Run tests/replica.sh; its output (the URLs it prints)."""
    done = subprocess.run(["bash", str(REPLICA_SH), *map(str, args)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"replica.sh {args[0]} failed:\n{done.stderr}"
    return done.stdout


def query(url: str, statement: str) -> list:
    """The rows one statement returns, on the server at `url`."""
    import anyio
    import asyncpg

    async def run():
        db = await asyncpg.connect(url)
        try:
            return [tuple(row) for row in await db.fetch(statement)]
        finally:
            await db.close()

    return anyio.run(run)


class Cluster:
    """A primary and its replica, started by tests/replica.sh in a folder of their own."""

    def __init__(self, mode: str):
        self.name = mode
        self.mode = "sync" if mode.startswith("sync") else "async"
        # On tmpfs when there is one: each fsync of initdb, pg_basebackup and the replica's
        # start-up took seconds on the shared disk. An immediate stop is a crash of the
        # processes, not of the machine, so what it loses is the same on either.
        self.folder = Path(
            tempfile.mkdtemp(prefix="sep3182-failover-", dir="/dev/shm" if Path("/dev/shm").is_dir() else None)
        )
        self.folder.chmod(0o755)  # the postgres user owns the clusters inside it
        self.old_port = free_port()  # for the crashed primary, started again at the end to be read
        try:
            self.primary, self.replica = replica_sh("start", self.folder, free_port(), free_port(), self.mode).split()
        except BaseException:  # one of the two started: stopped, not left running
            self.stop()
            raise

    def database(self, server: str, name: str) -> str:
        return server.rsplit("/", 1)[0] + "/" + name

    def wait_until_streaming(self) -> None:
        """Until the primary sees its replica streaming (and, in sync mode, as its synchronous standby)."""
        wanted = "sync" if self.mode == "sync" else "async"
        for _ in range(200):
            if query(self.primary, "SELECT state, sync_state FROM pg_stat_replication") == [("streaming", wanted)]:
                return
            time.sleep(0.05)
        raise AssertionError(f"the replica never streamed: {query(self.primary, 'TABLE pg_stat_replication')}")

    cut_off_at = float("inf")  # when the replica stopped receiving, if it did

    def cut_off_the_replica(self) -> None:
        """Stop the replica's WAL receiver: from now on it keeps what it has and receives nothing more,
        as a replica that fell behind does. (Pausing its replay would not do: promotion replays
        every WAL record the replica received before it ends recovery.)"""
        query(self.replica, "ALTER SYSTEM SET primary_conninfo = ''")
        query(self.replica, "SELECT pg_reload_conf()")
        for _ in range(200):
            if not query(self.primary, "SELECT pid FROM pg_stat_replication"):
                self.cut_off_at = time.monotonic()
                return
            time.sleep(0.05)
        raise AssertionError("the replica was still streaming")

    def pause_replay(self) -> None:
        """Pause the replica's replay (pg_wal_replay_pause): it goes on receiving WAL, and applies none."""
        query(self.replica, "SELECT pg_wal_replay_pause()")
        for _ in range(200):
            if query(self.replica, "SELECT pg_get_wal_replay_pause_state()") == [("paused",)]:
                return
            time.sleep(0.05)
        raise AssertionError("the replica's replay never paused")

    def received_everything(self) -> int:
        """Wait until the replica has received all the WAL the primary flushed by now; how many bytes of it
        the replica has received and not applied."""
        (flushed,) = query(self.primary, "SELECT pg_current_wal_flush_lsn()::text")[0]
        for _ in range(200):
            ((received, behind),) = query(
                self.replica,
                f"SELECT pg_last_wal_receive_lsn() >= '{flushed}', "
                "pg_wal_lsn_diff(pg_last_wal_receive_lsn(), "
                "pg_last_wal_replay_lsn())",
            )
            if received:
                return int(behind)
            time.sleep(0.05)
        raise AssertionError("the replica never received the primary's WAL")

    def stop(self) -> None:
        with contextlib.suppress(AssertionError, subprocess.TimeoutExpired):
            replica_sh("stop", self.folder)
        shutil.rmtree(self.folder, ignore_errors=True)
