# The runner driver's own part of templates/fleet-agent: `fleet-mcp runner`
# owns one Claude Code conversation through the Claude Agent SDK and serves the
# fleet's HTTP API on loopback, reached through Coder's app proxy as the app
# `fleet`. The root module counts this module in with `driver = "runner"`.
# Here: the runner's optional parameters and key, its environment, the start
# and stop scripts, the Claude credentials and git's external auth.

terraform {
  required_providers {
    coder = {
      source = "coder/coder"
    }
  }
}

variable "agent_id" {
  type        = string
  description = "The Coder agent the runner runs on."
}

variable "workdir" {
  type        = string
  description = "The project directory."
}

variable "agent_spec" {
  type        = string
  description = "The spec: the runner's first turn."
}

variable "system_prompt" {
  type        = string
  description = "The role's prompt, appended to Claude Code's own."
}

variable "fleet_mcp_version" {
  type = string
}

variable "fleet_mcp_package" {
  type = string
}

variable "anthropic_api_key" {
  type      = string
  sensitive = true
}

variable "claude_code_oauth_token" {
  type      = string
  sensitive = true
}

variable "permission_mode" {
  type = string
}

variable "runner_subdomain" {
  type = bool
}

variable "git_external_auth_id" {
  type = string
}

data "coder_workspace" "me" {}
data "coder_workspace_owner" "me" {}

# Declared only when configured: Coder refuses a template naming a provider the deployment lacks.
data "coder_external_auth" "git" {
  count = var.git_external_auth_id != "" ? 1 : 0
  id    = var.git_external_auth_id
}

# --- optional runner parameters: empty = the runner's default (no limit) ---

data "coder_parameter" "model" {
  name         = "fleet_mcp_model"
  display_name = "Model"
  description  = "Claude model for this agent; empty: Claude Code's default."
  type         = "string"
  form_type    = "input"
  mutable      = true
  default      = ""
  order        = 6
}

data "coder_parameter" "max_turns" {
  name         = "fleet_mcp_max_turns"
  display_name = "Max turns"
  description  = "Most model turns per task; empty: no limit."
  type         = "string"
  form_type    = "input"
  mutable      = true
  default      = ""
  order        = 7

  validation {
    regex = "^([1-9][0-9]{0,5})?$"
    error = "a whole number from 1, or empty"
  }
}

data "coder_parameter" "max_cost_usd" {
  name         = "fleet_mcp_max_cost_usd"
  display_name = "Max cost (USD)"
  description  = "Most a task may spend, in USD; empty: no limit."
  type         = "string"
  form_type    = "input"
  mutable      = true
  default      = ""
  order        = 8

  validation {
    regex = "^([0-9]{1,6}(\\.[0-9]{1,4})?)?$"
    error = "USD, e.g. 2.50, or empty"
  }
}

data "coder_parameter" "result_schema" {
  name         = "fleet_mcp_result_schema"
  display_name = "Result schema"
  description  = "A JSON Schema the spec's answer must fit; empty: a plain answer."
  type         = "string"
  form_type    = "textarea"
  mutable      = true
  default      = ""
  order        = 9
}

# The runner's key, made by fleet-mcp's create_agent. The runner is handed only its SHA-256
# (FLEET_RUNNER_KEY_SHA256), so the key itself is in no file, environment or script of the workspace.
# With FLEET_MCP_RUNNER_SECRET set on the server, the value is "<nonce>.<sha256 of the key>" and the key
# (derived from the secret and the nonce) is not even here: the agent can read its own parameters.
data "coder_parameter" "runner_key" {
  name         = "fleet_mcp_runner_key"
  display_name = "Runner key"
  description  = "Set only by fleet-mcp's create_agent; the runner refuses every call without it."
  type         = "string"
  form_type    = "input"
  mutable      = true
  default      = ""
  order        = 10
}

locals {
  runner_port = 4300
  runner_url  = "http://127.0.0.1:${local.runner_port}"
  runner_slug = "fleet"

  # The runner's verifier: the part after "." (a key derived from FLEET_MCP_RUNNER_SECRET), else the key's SHA-256.
  runner_key        = data.coder_parameter.runner_key.value
  runner_key_sha256 = local.runner_key == "" ? "" : (length(split(".", local.runner_key)) > 1 ? split(".", local.runner_key)[1] : sha256(local.runner_key))

  # "preinstalled": the image already has fleet-mcp with the runner extra on PATH; nothing is installed.
  fleet_mcp_requirement = (var.fleet_mcp_package == "preinstalled" ? "" :
  var.fleet_mcp_package != "" ? var.fleet_mcp_package : "coder-fleet-mcp[runner]==${var.fleet_mcp_version}")

  # The Host names the runner answers besides loopback: Coder's app proxy passes the request's own Host on
  # (the access URL's host for a path app, the app's own subdomain otherwise). Anything else is refused
  # (DNS rebinding of a forwarded port).
  owner_name = lower(data.coder_workspace_owner.me.name)
  ws_name    = lower(data.coder_workspace.me.name)
  runner_hosts = join(",", [
    regex("^[a-zA-Z][a-zA-Z0-9+.-]*://([^/:]+)", data.coder_workspace.me.access_url)[0],
    "${local.runner_slug}--main--${local.ws_name}--${local.owner_name}.*",
    "${local.runner_slug}--${local.ws_name}--${local.owner_name}.*",
  ])

  # The runner's environment (specs/runner.md). It is written into the start
  # script base64-encoded rather than set with coder_env: the Coder agent
  # expands `$VAR` in coder_env values, which would corrupt a spec that has one.
  # CODER_AGENT_URL and CODER_AGENT_TOKEN come from the agent itself.
  runner_env = {
    FLEET_RUNNER_SPEC            = var.agent_spec
    FLEET_RUNNER_SYSTEM_PROMPT   = var.system_prompt
    FLEET_RUNNER_MODEL           = data.coder_parameter.model.value
    FLEET_RUNNER_MAX_TURNS       = data.coder_parameter.max_turns.value
    FLEET_RUNNER_MAX_COST_USD    = data.coder_parameter.max_cost_usd.value
    FLEET_RUNNER_RESULT_SCHEMA   = data.coder_parameter.result_schema.value
    FLEET_RUNNER_WORKDIR         = var.workdir
    FLEET_RUNNER_STATE_FILE      = "/home/coder/.fleet-runner/state.json"
    FLEET_RUNNER_PORT            = tostring(local.runner_port)
    FLEET_RUNNER_APP_SLUG        = local.runner_slug
    FLEET_RUNNER_PERMISSION_MODE = var.permission_mode
    FLEET_RUNNER_KEY_SHA256      = local.runner_key_sha256
    FLEET_RUNNER_ALLOWED_HOSTS   = local.runner_hosts
    FLEET_RUNNER_REQUIREMENT     = local.fleet_mcp_requirement
    FLEET_RUNNER_GIT_AUTH_ID     = var.git_external_auth_id
    DISABLE_AUTOUPDATER          = "1"
  }
}

# Credentials reach every process of the agent, the runner's Claude Code included.
# Only created when set: an empty key is no key, and the user's own secret (see README) may supply it.
resource "coder_env" "anthropic_api_key" {
  count    = var.anthropic_api_key != "" ? 1 : 0
  agent_id = var.agent_id
  name     = "ANTHROPIC_API_KEY"
  value    = var.anthropic_api_key
}

resource "coder_env" "claude_code_oauth_token" {
  count    = var.claude_code_oauth_token != "" ? 1 : 0
  agent_id = var.agent_id
  name     = "CLAUDE_CODE_OAUTH_TOKEN"
  value    = var.claude_code_oauth_token
}

# Installs coder-fleet-mcp[runner] (its claude-agent-sdk bundles the Claude Code
# CLI the runner drives: that is the Claude Code install) and starts the runner
# in the background; the script exits once /health answers, so a runner that
# cannot start fails this script with its log in the build's agent logs.
resource "coder_script" "fleet_runner" {
  agent_id           = var.agent_id
  display_name       = "fleet-mcp runner"
  icon               = "/icon/claude.svg"
  run_on_start       = true
  start_blocks_login = false
  timeout            = 900
  script             = <<-EOT
    #!/usr/bin/env bash
    set -euo pipefail
    %{for name, value in local.runner_env~}
    export ${name}="$(printf '%s' '${base64encode(value)}' | base64 -d)"
    %{endfor~}
    # As an argument, not on stdin, where a command of the script could read the rest of it.
    bash -c "$(printf '%s' '${base64encode(file("${path.module}/start-runner.sh"))}' | base64 -d)"
  EOT
}

resource "coder_script" "fleet_runner_stop" {
  agent_id     = var.agent_id
  display_name = "fleet-mcp runner stop"
  icon         = "/icon/claude.svg"
  run_on_stop  = true
  script       = <<-EOT
    #!/usr/bin/env bash
    export FLEET_RUNNER_STATE_FILE="$(printf '%s' '${base64encode(local.runner_env["FLEET_RUNNER_STATE_FILE"])}' | base64 -d)"
    bash -c "$(printf '%s' '${base64encode(file("${path.module}/stop-runner.sh"))}' | base64 -d)"
  EOT
}

# The fleet's door to the runner: Coder's app proxy, which lets only the owner through.
resource "coder_app" "fleet" {
  agent_id     = var.agent_id
  slug         = local.runner_slug
  display_name = "Fleet runner"
  icon         = "/icon/claude.svg"
  url          = local.runner_url
  subdomain    = var.runner_subdomain
  share        = "owner"
  open_in      = "tab"
  order        = 1

  healthcheck {
    url       = "${local.runner_url}/health"
    interval  = 5
    threshold = 60
  }
}
