#!/usr/bin/env bash
# A throwaway PostgreSQL primary with one streaming replica, both on 127.0.0.1 only,
# for the failover tests (tests/test_failover.py) and for trying failover by hand.
#
#   tests/replica.sh start DIR PRIMARY_PORT REPLICA_PORT async|sync
#                               initdb a primary in DIR/primary, start it, make DIR/replica
#                               a standby of it (pg_basebackup -R), start that; print both URLs.
#                               sync: the primary names the replica in synchronous_standby_names,
#                               so a commit returns once the replica has flushed its WAL.
#   tests/replica.sh crash DIR  stop the primary abruptly (pg_ctl stop -m immediate): what a
#                               machine that dies does to it; nothing more reaches the replica.
#   tests/replica.sh promote DIR  make the replica a primary (pg_ctl promote), waiting until it is.
#   tests/replica.sh restart-old DIR PORT  start the crashed primary again, on its own, on PORT,
#                               to read what it had committed (its crash recovery replays its WAL).
#   tests/replica.sh stop DIR   stop whatever of the two still runs (DIR can then be deleted).
#
# Uses Debian's PostgreSQL 15 (apt-get install postgresql). initdb and pg_ctl refuse to
# run as root, so as root they run as the postgres user, as tests/postgres.sh does.
set -euo pipefail
command=${1:?start, crash, promote, restart-old or stop}; dir=${2:?a folder for the two clusters}
bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
[ -x "$bin/pg_ctl" ] || { echo "no PostgreSQL server installed (apt-get install postgresql)" >&2; exit 1; }
as_owner() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
# 127.0.0.1 only; the socket in DIR, not /var/run/postgresql, so nothing meets another cluster.
options() { echo "-p $1 -k $dir -c listen_addresses=127.0.0.1 ${2:-}"; }

case "$command" in
  start)
    primary_port=${3:?a port for the primary}; replica_port=${4:?a port for the replica}; mode=${5:?async or sync}
    mkdir -p "$dir"
    [ "$(id -u)" = 0 ] && chown postgres: "$dir"
    as_owner "$bin/initdb" -D "$dir/primary" -U postgres --auth=trust -E UTF8 --no-sync >"$dir/initdb.log"
    # Asynchronous: a commit returns once it is on the primary's disk; the replica follows
    # when it can. Synchronous: also once the replica named here has flushed it.
    sync=""
    [ "$mode" = sync ] && sync="-c synchronous_standby_names=replica -c synchronous_commit=on"
    as_owner "$bin/pg_ctl" -D "$dir/primary" -l "$dir/primary.log" -w \
      -o "$(options "$primary_port" "$sync")" start >/dev/null
    # -R writes primary_conninfo (with the application_name the primary's list names) and
    # standby.signal: the copy starts as a hot standby, streaming from the primary.
    as_owner "$bin/pg_basebackup" -D "$dir/replica" -R -X stream --checkpoint=fast --no-sync \
      -d "host=127.0.0.1 port=$primary_port user=postgres application_name=replica"
    as_owner "$bin/pg_ctl" -D "$dir/replica" -l "$dir/replica.log" -w \
      -o "$(options "$replica_port" "-c hot_standby=on -c recovery_init_sync_method=syncfs")" start >/dev/null
    echo "postgresql://postgres@127.0.0.1:$primary_port/postgres"
    echo "postgresql://postgres@127.0.0.1:$replica_port/postgres"
    ;;
  crash)
    as_owner "$bin/pg_ctl" -D "$dir/primary" -m immediate -w stop >/dev/null
    ;;
  promote)
    as_owner "$bin/pg_ctl" -D "$dir/replica" -w promote >/dev/null
    ;;
  restart-old)
    port=${3:?a port}
    rm -f "$dir/primary/standby.signal"
    # Alone now: it must not wait for a synchronous standby that is gone.
    as_owner "$bin/pg_ctl" -D "$dir/primary" -l "$dir/primary-again.log" -w \
      -o "$(options "$port" "-c synchronous_standby_names=")" start >/dev/null
    echo "postgresql://postgres@127.0.0.1:$port/postgres"
    ;;
  stop)
    for cluster in primary replica; do
      if [ -f "$dir/$cluster/postmaster.pid" ]; then
        as_owner "$bin/pg_ctl" -D "$dir/$cluster" -m immediate -w stop >/dev/null 2>&1 || true
      fi
    done
    ;;
  *) echo "usage: $0 start DIR PRIMARY_PORT REPLICA_PORT async|sync | crash DIR | promote DIR |" \
          "restart-old DIR PORT | stop DIR" >&2; exit 2 ;;
esac
