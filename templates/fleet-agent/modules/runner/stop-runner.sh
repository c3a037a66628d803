#!/usr/bin/env bash
# Stop the runner started by start-runner.sh: SIGTERM to its supervisor, which stops
# the runner (its state is on disk after every change, so nothing is lost either way).
state_dir="$(dirname "${FLEET_RUNNER_STATE_FILE:-$HOME/.fleet-runner/state.json}")"
pid_file="$state_dir/runner.pid"
if [ -f "$pid_file" ] && kill -0 "$(cat "$pid_file")" 2>/dev/null; then
  kill -TERM "$(cat "$pid_file")" 2>/dev/null || true
  for _ in $(seq 1 20); do
    kill -0 "$(cat "$pid_file")" 2>/dev/null || break
    sleep 0.5
  done
fi
rm -f "$pid_file"
