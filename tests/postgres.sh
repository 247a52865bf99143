#!/usr/bin/env bash
# A throwaway PostgreSQL server for the PostgreSQL tests and demo, on 127.0.0.1 only.
#
#   tests/postgres.sh start DIR PORT   initdb in DIR, start on PORT, print the URL to use
#   tests/postgres.sh stop DIR         stop it (DIR can then be deleted)
#
# Uses Debian's PostgreSQL (apt-get install postgresql; 15 was tested). initdb and
# pg_ctl refuse to run as root, so as root they run as the postgres user.
set -euo pipefail
command=${1:?start or stop}; dir=${2:?a folder for the cluster}
bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
[ -x "$bin/pg_ctl" ] || { echo "no PostgreSQL server installed (apt-get install postgresql)" >&2; exit 1; }
as_owner() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }

case "$command" in
  start)
    port=${3:?a port}
    mkdir -p "$dir"
    [ "$(id -u)" = 0 ] && chown postgres: "$dir"
    as_owner "$bin/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 --no-sync >"$dir/initdb.log"
    as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w \
      -o "-p $port -k $dir -c listen_addresses=127.0.0.1" start >/dev/null
    echo "postgresql://postgres@127.0.0.1:$port/postgres"
    ;;
  stop)
    as_owner "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null
    ;;
  *) echo "usage: $0 start DIR PORT | stop DIR" >&2; exit 2 ;;
esac
