#!/usr/bin/env bash
# The `strata` command line: help asked for goes to stdout with status 0; a mistake (an
# unknown option, a stray argument) is an error on stderr with status 2, never ignored.
# Usage: tests/scripts/cli_args.sh STRATA
set -u
bin=$1
fails=0
run() {  # run ARGS...: sets rc, out, err (20 s: a command that starts serving instead fails)
  out=$(timeout 20 "$bin" "$@" 2>/tmp/strata_cli_err.$$); rc=$?
  err=$(cat /tmp/strata_cli_err.$$)
}
check() {
  if eval "$2"; then echo "ok - $1"; else echo "not ok - $1 (rc $rc, stdout '${out:0:200}', stderr '${err:0:200}')"; fails=1; fi
}
run serve -h
check "strata serve -h prints the serve help, status 0" '[ $rc -eq 0 ] && [[ $out == *"strata serve [--config FILE]"* ]]'
run serve --help
check "strata serve --help likewise" '[ $rc -eq 0 ] && [[ $out == *"strata serve [--config FILE]"* ]]'
run --help
check "strata --help: usage on stdout, status 0" '[ $rc -eq 0 ] && [[ $out == *"usage: strata <command>"* ]] && [ -z "$err" ]'
run -h
check "strata -h likewise" '[ $rc -eq 0 ] && [[ $out == *"usage: strata <command>"* ]]'
run --version
check "strata --version" '[ $rc -eq 0 ] && [[ $out =~ ^strata\ [0-9]+\.[0-9]+\.[0-9]+$ ]]'
run
check "strata alone: usage on stderr, status 2" '[ $rc -eq 2 ] && [[ $err == *"usage: strata"* ]] && [ -z "$out" ]'
run serve --bogus 1
check "an unknown option is an error" '[ $rc -eq 2 ] && [[ $err == *"--bogus: unknown option"* ]]'
run serve stray --port 0
check "a positional argument is an error" '[ $rc -eq 2 ] && [[ $err == *"unexpected argument '"'"'stray'"'"'"* ]]'
run serve -p 8000
check "a single-dash option is an error" '[ $rc -eq 2 ] && [[ $err == *"unexpected argument '"'"'-p'"'"'"* ]]'
run generate --model /nonexistent extra
check "other commands too (generate)" '[ $rc -eq 2 ] && [[ $err == *"unexpected argument '"'"'extra'"'"'"* ]]'
rm -f /tmp/strata_cli_err.$$
[ $fails -eq 0 ] && echo "cli_args: all passed"
exit $fails
