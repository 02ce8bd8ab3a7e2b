#!/usr/bin/env bash
# Planned call 3: run2.sh at 16000/500, c = 64 (64 measured).
INPUT=16000 LEVELS="64:64" BUDGET=500 exec bash "$(dirname "$0")/run2.sh"
