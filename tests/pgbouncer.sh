#!/usr/bin/env bash
# pgbouncer in transaction mode in front of a PostgreSQL server, on 127.0.0.1 only.
#
#   tests/pgbouncer.sh start DIR PORT POSTGRES_URL   start on PORT, print the URL to use through it
#   tests/pgbouncer.sh stop DIR                      stop it (DIR can then be deleted)
#
# Uses Debian's pgbouncer (apt-get install pgbouncer; 1.18 was tested). Two server
# connections per database, so that the instances behind it really share them.
# pgbouncer refuses to run as root, so as root it runs as the postgres user.
set -euo pipefail
command=${1:?start or stop}; dir=${2:?a folder for its files}
binary=$(command -v pgbouncer || echo /usr/sbin/pgbouncer)
[ -x "$binary" ] || { echo "no pgbouncer installed (apt-get install pgbouncer)" >&2; exit 1; }
as_owner() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }

case "$command" in
  start)
    port=${3:?a port}; upstream=${4:?the URL of the PostgreSQL server}
    hostport=${upstream#*@}; hostport=${hostport%%/*}; user=${upstream#postgresql://}; user=${user%%@*}
    mkdir -p "$dir"
    printf '"%s" ""\n' "$user" >"$dir/users.txt"
    cat >"$dir/pgbouncer.ini" <<INI
[databases]
* = host=${hostport%:*} port=${hostport#*:}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
auth_type = trust
admin_users = $user
auth_file = $dir/users.txt
pool_mode = transaction
default_pool_size = 2
max_client_conn = 200
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
INI
    [ "$(id -u)" = 0 ] && chown -R postgres: "$dir"
    as_owner "$binary" -d "$dir/pgbouncer.ini"
    for _ in $(seq 50); do [ -s "$dir/pgbouncer.pid" ] && break; sleep 0.1; done
    echo "postgresql://$user@127.0.0.1:$port/postgres?pooler=transaction"
    ;;
  stop)
    kill "$(cat "$dir/pgbouncer.pid")"
    ;;
  *) echo "usage: $0 start DIR PORT POSTGRES_URL | stop DIR" >&2; exit 2 ;;
esac
