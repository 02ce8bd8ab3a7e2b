#!/usr/bin/env bash
# Installs what tools/run.sh and tools/test.sh need on a fresh Debian 12 machine, skipping
# what is already there. Usage: tools/deps.sh [build|test]
set -euo pipefail
mode=${1:-build}
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi

pkgs=(build-essential cmake ninja-build pkg-config libboost1.81-dev libboost-json1.81-dev
      libyaml-cpp-dev libgtest-dev libpcre2-dev)
if [ "$mode" = test ]; then
  pkgs+=(nodejs npm prometheus chromium python3 python3-jinja2 clang libclang-rt-14-dev)
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
# Node may come from elsewhere than Debian's package (it does on these machines).
if command -v node >/dev/null && command -v npm >/dev/null; then
  missing=("${missing[@]/nodejs}"); missing=("${missing[@]/npm}")
fi
missing=($(printf '%s\n' "${missing[@]}" | grep -v '^$' || true))
if [ ${#missing[@]} -gt 0 ]; then
  echo "deps: installing ${missing[*]}"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# npm packages for test fixtures (tokenizer parity, API clients, browser tests).
if [ "$mode" = test ] && [ -f tools/npm/package.json ]; then
  if [ ! -d tools/npm/node_modules ] || [ tools/npm/package.json -nt tools/npm/node_modules ]; then
    (cd tools/npm && npm install --no-audit --no-fund --loglevel=error)
    touch tools/npm/node_modules
  fi
fi
