#!/usr/bin/env bash
# Resident memory of `tally demo` under load: wrk on GET /v1/me and on
# POST /v1/payments (32 connections each, bounded in time) while two clients sign
# in over and over, then after 100 more sign-ins. Prints the server's current and
# peak resident memory (VmRSS, VmHWM) at each step. The goals: under 128 MiB
# during the load and under 64 MiB after 100 sign-ins.
#
# Usage: scripts/memory-under-load.sh [PATH_TO_TALLY]   (default target/release/tally)
# Needs wrk and python3; everything listens on 127.0.0.1 and stops by itself.
set -euo pipefail
cd "$(dirname "$0")/.."
tally_bin=${1:-target/release/tally}
seconds=${LOAD_SECONDS:-10}
command -v wrk >/dev/null || { echo "wrk is not installed (apt-get install wrk)" >&2; exit 1; }

work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

TALLY_DATABASE_URL="sqlite://$work/tally.db" TALLY_LISTEN=127.0.0.1:0 \
  TALLY_API_RATE_LIMIT=100000000 TALLY_OAUTH_RATE_LIMIT=100000000 TALLY_LOG=warn \
  "$tally_bin" demo >"$work/demo.out" 2>"$work/demo.err" &
server=$!
pids+=("$server")
for _ in $(seq 1 60); do
  grep -q 'oauth/authorize' "$work/demo.out" 2>/dev/null && break
  sleep 1
done
origin=$(head -1 "$work/demo.out" | awk '{print $NF}')
authorize_url=$(tail -1 "$work/demo.out" | tr -d ' ')
token=$(python3 .ci/demo_token.py "$authorize_url" alice tally-demo-password)
bob_id=$(curl -sf -H "Authorization: Bearer $token" "$origin/v1/users?query=bob" \
  | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])')

memory() {  # label
  awk -v label="$1" '/^VmRSS:/ {rss=$2} /^VmHWM:/ {hwm=$2}
    END {printf "%-34s resident %4d MiB, peak %4d MiB\n", label, rss/1024, hwm/1024}' \
    "/proc/$server/status"
}
sign_ins() {  # count
  for _ in $(seq 1 "$1"); do
    python3 .ci/demo_token.py "$authorize_url" carol tally-demo-password >/dev/null
  done
}

memory "after start"
cat >"$work/me.lua" <<LUA
wrk.headers["Authorization"] = "Bearer $token"
LUA
cat >"$work/pay.lua" <<LUA
wrk.method = "POST"
wrk.headers["Authorization"] = "Bearer $token"
wrk.headers["Content-Type"] = "application/x-www-form-urlencoded"
wrk.body = "user_id=$bob_id&amount=0.01&note=load"
LUA
# Two sign-in loops for the length of the load.
for _ in 1 2; do
  (end=$((SECONDS + 2 * seconds)); while [ $SECONDS -lt $end ]; do sign_ins 1; done) &
  pids+=("$!")
done
wrk -t1 -c32 -d"${seconds}s" -s "$work/me.lua" "$origin/v1/me" | grep -E 'Requests/sec'
memory "during /me load + sign-ins"
wrk -t1 -c32 -d"${seconds}s" -s "$work/pay.lua" "$origin/v1/payments" | grep -E 'Requests/sec'
memory "during payments load + sign-ins"
wait "${pids[@]:1}" 2>/dev/null || true
sign_ins 100
memory "after 100 more sign-ins"
