#!/usr/bin/env bash
# Start `fleet-mcp runner` in this workspace: run by the template's coder_script
# with the FLEET_RUNNER_* environment of specs/runner.md already exported.
#
#   FLEET_RUNNER_REQUIREMENT  what to install (e.g. coder-fleet-mcp[runner]==0.1.0);
#                             empty: use the fleet-mcp already on PATH (an image with it baked in)
#   FLEET_RUNNER_GIT_AUTH_ID  a Coder external auth provider id: gh gets a fresh token from it
#
# The runner runs under a small supervisor in the background (restarted after a
# crash, not after exit 2, which means bad settings); this script exits 0 once
# the runner answers /health, or 1 with the end of its log.
set -euo pipefail

state_dir="$(dirname "$FLEET_RUNNER_STATE_FILE")"
log="$state_dir/runner.log"
pid_file="$state_dir/runner.pid"
mkdir -p "$FLEET_RUNNER_WORKDIR" "$state_dir" "$HOME/.local/bin"
export PATH="$HOME/.local/bin:$PATH"

if [ -n "${FLEET_RUNNER_REQUIREMENT:-}" ]; then
  echo "Installing $FLEET_RUNNER_REQUIREMENT"
  if ! command -v uv >/dev/null 2>&1; then
    curl -LsSf https://astral.sh/uv/install.sh | env UV_NO_MODIFY_PATH=1 sh
  fi
  # Same requirement as the last start: uv keeps the installed tool (seconds, no download).
  uv tool install --quiet "$FLEET_RUNNER_REQUIREMENT"
fi
if ! command -v fleet-mcp >/dev/null 2>&1; then
  echo "fleet-mcp is not installed: set the template variable fleet_mcp_package or fleet_mcp_version" >&2
  exit 1
fi

if [ -n "${FLEET_RUNNER_GIT_AUTH_ID:-}" ]; then
  # gh reads GH_TOKEN on each call; the wrapper asks Coder for a fresh token every time,
  # so expiring tokens (GitHub Apps: 8 h) keep working. git itself uses Coder's GIT_ASKPASS.
  real_gh="$(command -v gh || true)"
  if [ -z "$real_gh" ] && command -v apt-get >/dev/null 2>&1; then
    sudo apt-get -qq update && sudo apt-get -qq install -y gh >/dev/null || echo "gh not installed; pull requests need it"
    real_gh="$(command -v gh || true)"
  fi
  if [ -n "$real_gh" ]; then
    mkdir -p "$state_dir/bin"
    printf '#!/bin/sh\nGH_TOKEN="$(coder external-auth access-token %s)" exec %s "$@"\n' \
      "$FLEET_RUNNER_GIT_AUTH_ID" "$real_gh" >"$state_dir/bin/gh"
    chmod +x "$state_dir/bin/gh"
    export PATH="$state_dir/bin:$PATH"
  fi
fi

# A runner left from an earlier start of this agent (the volume outlives the container).
if [ -f "$pid_file" ] && kill -0 "$(cat "$pid_file")" 2>/dev/null; then
  kill -TERM "$(cat "$pid_file")" 2>/dev/null || true
  sleep 1
fi

supervise() {
  child=""
  trap '[ -n "$child" ] && kill -TERM "$child" 2>/dev/null; wait "$child"; exit 0' TERM INT
  while :; do
    fleet-mcp runner &
    child=$!
    code=0
    wait "$child" || code=$?
    if [ "$code" -eq 2 ]; then
      echo "fleet-mcp runner refused its settings (exit 2); not restarting"
      exit 2
    fi
    echo "fleet-mcp runner exited with $code; restarting in 5 s"
    sleep 5
  done
}

cd "$FLEET_RUNNER_WORKDIR"
nohup bash -c "$(declare -f supervise); supervise" >>"$log" 2>&1 </dev/null &
echo $! >"$pid_file"

health="http://127.0.0.1:$FLEET_RUNNER_PORT/health"
for _ in $(seq 1 120); do
  if curl -fsS -o /dev/null "$health" 2>/dev/null; then
    echo "fleet-mcp runner is up on 127.0.0.1:$FLEET_RUNNER_PORT (log: $log)"
    exit 0
  fi
  if ! kill -0 "$(cat "$pid_file")" 2>/dev/null; then
    break
  fi
  sleep 1
done
echo "fleet-mcp runner did not answer $health; the end of $log:" >&2
tail -n 20 "$log" >&2 || true
exit 1
