#!/usr/bin/env bash
# s56: run prepared scripts one after another inside one device call; each gets what is left
# of BUDGET seconds (default 570), so a late one is cut short rather than the whole call.
set -u
BUDGET=${BUDGET:-570}
for s in "$@"; do
  left=$((BUDGET - SECONDS))
  if [ "$left" -lt 30 ]; then echo "skip $s: ${left}s left"; continue; fi
  echo "== $s (${left}s left)"
  timeout "$left" bash "$s"; echo "rc=$? after ${SECONDS}s"
done
