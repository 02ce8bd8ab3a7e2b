# Shell helpers shared by the scripts that start `strata serve` themselves
# (tools/gpu/bench_serve.sh, tools/gpu/guardrail_vs_eval.sh). Sourced (bash); the caller sets
# server_pid to the server's pid and installs `trap stop_server EXIT`.

server_pid=
# Stops the server (TERM, up to 20 s, then KILL) and forgets it.
stop_server() {
  [ -n "$server_pid" ] || return 0
  kill "$server_pid" 2>/dev/null
  for _ in $(seq 1 40); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.5; done
  kill -9 "$server_pid" 2>/dev/null
  wait "$server_pid" 2>/dev/null
  server_pid=
}

# GET /health over bash's /dev/tcp (no curl needed): 0 when it answers 200.
healthy() {
  local reply
  { exec 3<>"/dev/tcp/127.0.0.1/$1"; } 2>/dev/null || return 1
  printf 'GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3
  IFS= read -r -t 5 reply <&3
  exec 3<&- 3>&-
  [[ $reply == *" 200 "* ]]
}

# wait_ready LOG READY_S POLL_S: waits (at most READY_S seconds, polling every POLL_S) for the
# server started with `--port 0` (pid server_pid, output in LOG) to print its port and answer
# /health; sets `port` (empty when it never printed one) and `ready_s_took`. 0 when healthy.
wait_ready() {
  local log=$1 limit=$2 poll=$3 t0
  port=
  t0=$(date +%s)
  while [ $(($(date +%s) - t0)) -lt "$limit" ] && kill -0 "$server_pid" 2>/dev/null; do
    [ -z "$port" ] && port=$(sed -n 's/.*listening on [0-9.]*:\([0-9]*\).*/\1/p' "$log" | head -1)
    [ -n "$port" ] && healthy "$port" && break
    sleep "$poll"
  done
  ready_s_took=$(($(date +%s) - t0))
  [ -n "$port" ] && healthy "$port"
}
