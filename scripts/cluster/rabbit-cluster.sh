#!/usr/bin/env bash
# A three-node RabbitMQ cluster on one machine, for the cluster end-to-end test, the broker
# bench and anyone who wants to try fleetd on quorum queues. The machine's own node
# (rabbit@localhost, 127.0.0.1:5672) is the first member; this script adds rabbit2@localhost
# (5673) and rabbit3@localhost (5674), each with its own name, distribution port, directories,
# config and plugins file, owned by the rabbitmq user.
#
#   rabbit-cluster.sh up            start rabbit2 and rabbit3 and join them to rabbit@localhost
#   rabbit-cluster.sh down          take them out again (stop_app, reset, stop) and remove
#                                   their directories: rabbit@localhost is left a single node
#   rabbit-cluster.sh kill NODE     kill -9 NODE's Erlang VM (rabbit2 or rabbit3)
#   rabbit-cluster.sh start NODE    start NODE again after a kill (it rejoins by itself)
#   rabbit-cluster.sh status        the cluster as rabbit@localhost sees it
#
# Environment: FLEETD_CLUSTER_DIR (default /tmp/fleetd-rabbit-cluster). Needs root (it runs
# the nodes as the rabbitmq user) and rabbitmq-server on PATH or in /usr/sbin.
set -euo pipefail
export PATH="$PATH:/usr/sbin:/sbin"
base="${FLEETD_CLUSTER_DIR:-/tmp/fleetd-rabbit-cluster}"
nodes=(rabbit2 rabbit3)

port_of() { case "$1" in rabbit2) echo 5673 ;; rabbit3) echo 5674 ;; *) echo "unknown node $1 (rabbit2 or rabbit3)" >&2; exit 2 ;; esac; }
dist_of() { case "$1" in rabbit2) echo 25673 ;; rabbit3) echo 25674 ;; esac; }
ctl() { timeout 120 rabbitmqctl "$@"; }

node_env() {
  local n="$1" d="$base/$1"
  echo RABBITMQ_NODENAME="$n@localhost" RABBITMQ_NODE_PORT="$(port_of "$n")" \
    RABBITMQ_DIST_PORT="$(dist_of "$n")" RABBITMQ_MNESIA_BASE="$d/mnesia" \
    RABBITMQ_LOG_BASE="$d/log" RABBITMQ_PID_FILE="$d/pid" \
    RABBITMQ_FEATURE_FLAGS_FILE="$d/feature_flags" \
    RABBITMQ_ENABLED_PLUGINS_FILE="$d/enabled_plugins" \
    RABBITMQ_CONFIG_FILE="$d/rabbitmq.conf" RABBITMQ_ADVANCED_CONFIG_FILE="$d/advanced.config"
}

start_node() {
  local n="$1" d="$base/$1"
  mkdir -p "$d/mnesia" "$d/log"
  # Its own listener: the machine's rabbitmq.conf pins 5672, which rabbit@localhost holds.
  printf 'listeners.tcp.local = 127.0.0.1:%s\nloopback_users = none\n' "$(port_of "$n")" > "$d/rabbitmq.conf"
  echo '[].' > "$d/enabled_plugins"
  echo '[].' > "$d/advanced.config"
  chown -R rabbitmq:rabbitmq "$d"
  # shellcheck disable=SC2046
  runuser -u rabbitmq -- env $(node_env "$n") rabbitmq-server -detached
  # -detached returns before the node registers with epmd: wait for it to answer first.
  for _ in $(seq 1 120); do
    ctl -n "$n@localhost" ping >/dev/null 2>&1 && break
    sleep 0.5
  done
  ctl -n "$n@localhost" await_startup --timeout 90 >/dev/null
}

cmd="${1:-}"
case "$cmd" in
  up)
    command -v rabbitmq-server >/dev/null || { echo "rabbitmq-server is not installed" >&2; exit 3; }
    ctl -n rabbit@localhost await_startup --timeout 60 >/dev/null
    for n in "${nodes[@]}"; do
      start_node "$n"
      ctl -n "$n@localhost" stop_app >/dev/null
      ctl -n "$n@localhost" reset >/dev/null
      ctl -n "$n@localhost" join_cluster rabbit@localhost >/dev/null 2>>"$base/ctl.log"
      ctl -n "$n@localhost" start_app >/dev/null 2>>"$base/ctl.log"
      echo "$n@localhost joined (amqp://127.0.0.1:$(port_of "$n"))"
    done
    ;;
  down)
    # Quorum queues with members on the extra nodes were made on the cluster (the machine's
    # node had none before): deleted while the cluster still has a majority to do it.
    queues=$(ctl -n rabbit@localhost list_queues -q name members --formatter json 2>/dev/null |
      python3 -c 'import json,sys
# One object per line; a line that is not one (a timeout report) is skipped, not fatal.
for line in sys.stdin:
    try: q = json.loads(line.strip().lstrip(","))
    except ValueError: continue
    if isinstance(q, dict) and any(not m.startswith("rabbit@") for m in (q.get("members") or [])):
        print(q["name"])' || true)
    while IFS= read -r q; do
      [ -n "$q" ] && ctl -n rabbit@localhost delete_queue -q "$q" >/dev/null 2>&1 || true
    done <<< "$queues"
    for n in "${nodes[@]}"; do
      if ctl -n "$n@localhost" ping >/dev/null 2>&1; then
        ctl -n "$n@localhost" stop_app >/dev/null || true
        ctl -n "$n@localhost" reset >/dev/null || true
        ctl -n "$n@localhost" stop >/dev/null || true
      fi
      # A node that could not leave by itself (it was down) is removed by the others.
      if ctl -n rabbit@localhost cluster_status --formatter json 2>/dev/null | grep -q "\"$n@localhost\""; then
        ctl -n rabbit@localhost forget_cluster_node "$n@localhost" >/dev/null || true
      fi
      rm -rf "${base:?}/$n"
    done
    rm -rf "${base:?}"
    echo "rabbit@localhost is a single node again"
    ;;
  kill)
    n="${2:-}"; port_of "$n" >/dev/null
    pid=$(cat "$base/$n/pid" 2>/dev/null || true)
    [ -n "$pid" ] || pid=$(pgrep -u rabbitmq -f "beam.*-sname $n@localhost|beam.*$n@localhost" | head -1 || true)
    [ -n "$pid" ] || { echo "$n is not running" >&2; exit 4; }
    kill -9 "$pid"
    echo "killed $n@localhost (pid $pid)"
    ;;
  start)
    n="${2:-}"; port_of "$n" >/dev/null
    start_node "$n"
    echo "$n@localhost started"
    ;;
  status)
    ctl -n rabbit@localhost cluster_status
    ;;
  *)
    sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
