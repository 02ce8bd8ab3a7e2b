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
