#!/usr/bin/env bash
# each argument one pytest argument string, run under a cap: session 75's runner (the same
# script, which added START), numbering the outputs from 1
START=0 exec bash "$(cd "$(dirname "$0")" && pwd)/../../2026-12-07-s75/scripts/probe.sh" "$@"
