#!/usr/bin/env bash
# N `moeserve serve` replicas of one model on consecutive ports behind HAProxy (deploy/haproxy/moeserve.cfg):
#
#   scripts/serve_replicas.sh [--replicas 2] [--host 127.0.0.1] [--port 8000] [--logs DIR] MODEL_DIR [serve flags]
#
# HAProxy listens on HOST:PORT, replica i on 127.0.0.1:PORT+i (the serve flags must not name --host or --port), each
# with CUDA_VISIBLE_DEVICES set to the i-th entry of $CUDA_VISIBLE_DEVICES (default 0,1,...,N-1:
# one GPU each). HAProxy starts once every replica's /health answers 200. The config written from the template and
# each replica's log go to --logs (default build/replicas); HAProxy logs to this script's stderr.
# Ctrl-C or SIGTERM stops everything cleanly: HAProxy stops listening and lets its connections finish, the replicas
# drain (serve's --drain-timeout); a second Ctrl-C kills what is left. If HAProxy exits, the replicas are stopped.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

replicas=2 host=127.0.0.1 port=8000 logs=build/replicas
while [ $# -gt 0 ]; do
  case "$1" in
    --replicas) replicas=$2; shift 2 ;;
    --host) host=$2; shift 2 ;;
    --port) port=$2; shift 2 ;;
    --logs) logs=$2; shift 2 ;;
    *) break ;;
  esac
done
[ $# -ge 1 ] || { sed -n '2,4p' "$0" >&2; exit 2; }
[[ "$replicas" =~ ^[1-9][0-9]*$ && "$port" =~ ^[0-9]+$ ]] || { echo "serve_replicas: bad --replicas or --port" >&2; exit 2; }
haproxy=$(command -v haproxy || echo /usr/sbin/haproxy)
[ -x "$haproxy" ] || { echo "serve_replicas: haproxy not found; scripts/setup.sh installs it" >&2; exit 2; }
moeserve=${MOESERVE:-$root/build/moeserve}
mkdir -p "$logs"

# The template with its frontend's bind address and one server line per replica (the options of its first).
awk -v bind="$host:$port" -v n="$replicas" -v base="$port" '
  $1 == "bind" { sub(/bind[ \t]+[^ \t]+/, "bind " bind) }
  $1 == "server" {
    if (!done) for (i = 1; i <= n; ++i) {
      line = $0
      sub(/server[ \t]+[^ \t]+[ \t]+[^ \t]+/, "server replica" i " 127.0.0.1:" (base + i), line)
      print line
    }
    done = 1
    next
  }
  { print }' "$root/deploy/haproxy/moeserve.cfg" > "$logs/haproxy.cfg"
"$haproxy" -q -c -f "$logs/haproxy.cfg"

replica_pids=() haproxy_pid="" stopping=0
kill_all() { kill -KILL $(jobs -pr) 2>/dev/null || true; }  # the children still running
stop() {
  if [ "$stopping" = 1 ]; then kill_all; return; fi
  stopping=1
  echo "serve_replicas: stopping (again to kill)" >&2
  [ -z "$haproxy_pid" ] || kill -USR1 "$haproxy_pid" 2>/dev/null || true  # HAProxy's soft stop
  kill -TERM "${replica_pids[@]}" 2>/dev/null || true
}
trap stop INT TERM
# Whatever way the script ends, nothing it started outlives it.
trap kill_all EXIT

IFS=, read -ra gpus <<< "${CUDA_VISIBLE_DEVICES:-$(seq -s, 0 $((replicas - 1)))}"
for ((i = 1; i <= replicas; ++i)); do
  CUDA_VISIBLE_DEVICES=${gpus[$(((i - 1) % ${#gpus[@]}))]} \
    "$moeserve" serve "$@" --host 127.0.0.1 --port $((port + i)) 2> "$logs/replica$i.log" &
  replica_pids+=($!)
  echo "serve_replicas: replica$i pid $! on 127.0.0.1:$((port + i)), log $logs/replica$i.log" >&2
done

healthy() (  # GET /health on 127.0.0.1:$1 answers 200 (bash's /dev/tcp; no curl needed)
  exec 2>/dev/null 3<> "/dev/tcp/127.0.0.1/$1" || exit 1
  printf 'GET /health HTTP/1.0\r\n\r\n' >&3
  read -r -t 5 _ status _ <&3 && [ "$status" = 200 ]
)
for ((i = 1; i <= replicas; ++i)); do
  until healthy $((port + i)); do
    [ "$stopping" = 0 ] || { until wait; do :; done; exit 130; }
    kill -0 "${replica_pids[i - 1]}" 2>/dev/null || { echo "serve_replicas: replica$i exited; its log:" >&2
                                                        cat "$logs/replica$i.log" >&2; stop; wait; exit 1; }
    sleep 0.5
  done
done

"$haproxy" -db -f "$logs/haproxy.cfg" &
haproxy_pid=$!
echo "serve_replicas: HAProxy pid $haproxy_pid on http://$host:$port in front of $replicas replicas" >&2
while kill -0 "$haproxy_pid" 2>/dev/null; do wait "$haproxy_pid" || true; done
[ "$stopping" = 1 ] || stop
until wait; do :; done
