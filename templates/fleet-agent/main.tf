# fleet-agent: a Coder template for fleet-mcp agents, driven by `fleet-mcp runner`.
#
# One workspace = one Claude Code agent. Inside it `fleet-mcp runner` owns one
# Claude Code conversation through the Claude Agent SDK and serves the fleet's
# HTTP API on loopback, reached through Coder's app proxy as the app `fleet`.
# fleet-mcp creates workspaces from this template with the five `fleet_mcp_*`
# parameters, a role preset and, optionally, a model and budgets. Push one copy
# per project; the template name is the project name. See README.md.
#
# For deployments that drive Claude Code through AgentAPI (claude-code module
# 4.x, app `ccw`) see ../fleet-agent-agentapi.

terraform {
  required_version = ">= 1.9"
  required_providers {
    coder = {
      source = "coder/coder"
      # >= 2.9: presets with `default` and `description`; no module pulls in more.
      version = ">= 2.9, < 3.0"
    }
    docker = {
      source  = "kreuzwerker/docker"
      version = "~> 4.0"
    }
  }
}

# --- template variables (set with `coder templates push --variable k=v`) ---

variable "fleet_mcp_version" {
  type        = string
  description = "Version of coder-fleet-mcp installed in every workspace: the fleet server's own version."
  default     = "0.1.0"
  validation {
    condition     = can(regex("^[0-9][0-9A-Za-z.+!-]*$", var.fleet_mcp_version))
    error_message = "a version such as 0.1.0"
  }
}

variable "fleet_mcp_package" {
  type        = string
  description = "What to install instead of coder-fleet-mcp[runner]==<fleet_mcp_version> from PyPI: a requirement such as 'coder-fleet-mcp[runner] @ git+https://git.example.com/you/fleet-mcp@v0.1.0', or 'preinstalled' for an image that has it."
  default     = ""
}

variable "anthropic_api_key" {
  type        = string
  description = "Anthropic API key for Claude Code. Leave empty with claude_code_oauth_token, or when each user brings their own (see README)."
  sensitive   = true
  default     = ""
}

variable "claude_code_oauth_token" {
  type        = string
  description = "Claude Code OAuth token (from `claude setup-token`), instead of an API key."
  sensitive   = true
  default     = ""
}

variable "permission_mode" {
  type        = string
  description = "Claude Code permission mode of the runner. acceptEdits: file edits pass, other tools wait for the fleet's answer."
  default     = "acceptEdits"
  validation {
    condition     = contains(["default", "acceptEdits", "plan", "bypassPermissions", "dontAsk", "auto"], var.permission_mode)
    error_message = "one of default, acceptEdits, plan, bypassPermissions, dontAsk, auto"
  }
}

variable "runner_subdomain" {
  type        = bool
  description = "Serve the runner as a subdomain app (needs a wildcard access URL). Required where path apps are disabled."
  default     = false
}

variable "git_external_auth_id" {
  type        = string
  description = "ID of a Coder external auth provider (e.g. github) whose token agents use for git and gh; empty = none."
  default     = ""
}

variable "docker_socket" {
  type        = string
  description = "(Optional) Docker socket URI; empty = the provisioner's default."
  default     = ""
}

provider "docker" {
  host = var.docker_socket != "" ? var.docker_socket : null
}

data "coder_provisioner" "me" {}
data "coder_workspace" "me" {}
data "coder_workspace_owner" "me" {}

# Declared only when configured: Coder refuses a template naming a provider the deployment lacks.
data "coder_external_auth" "git" {
  count = var.git_external_auth_id != "" ? 1 : 0
  id    = var.git_external_auth_id
}

# --- the fleet parameters: every one mutable and defaulted, so a person can
# --- still create a workspace from this template by hand ---

data "coder_parameter" "managed" {
  name         = "fleet_mcp_managed"
  display_name = "Fleet managed"
  description  = "Set to true only by fleet-mcp's create_agent."
  type         = "bool"
  form_type    = "checkbox"
  mutable      = true
  default      = "false"
  order        = 1
}

data "coder_parameter" "role" {
  name         = "fleet_mcp_role"
  display_name = "Role"
  type         = "string"
  form_type    = "dropdown"
  mutable      = true
  default      = "coder"
  order        = 2

  option {
    name        = "Software Engineer"
    value       = "coder"
    description = "Writes code, implements features, fixes bugs"
  }
  option {
    name        = "Operations Engineer"
    value       = "operator"
    description = "Manages deployments, monitors systems, handles incidents"
  }
  option {
    name        = "Engineering Manager"
    value       = "manager"
    description = "Coordinates work, reviews specs, verifies agent alignment"
  }
}

data "coder_parameter" "project" {
  name         = "fleet_mcp_project"
  display_name = "Project"
  type         = "string"
  form_type    = "input"
  mutable      = true
  default      = ""
  order        = 3

  validation {
    regex = "^([A-Za-z0-9][A-Za-z0-9._-]{0,62})?$"
    error = "letters, digits, . _ - (max 63) or empty"
  }
}

data "coder_parameter" "agent_spec" {
  name         = "fleet_mcp_agent_spec"
  display_name = "Agent spec"
  description  = "What the agent is for; Claude Code's first prompt (at most 64 KiB)."
  type         = "string"
  form_type    = "textarea"
  mutable      = true
  default      = ""
  order        = 4
}

data "coder_parameter" "current_task" {
  name         = "fleet_mcp_current_task"
  display_name = "Current task"
  description  = "The task the agent was created with; later tasks are sent to the runner."
  type         = "string"
  form_type    = "textarea"
  mutable      = true
  default      = ""
  order        = 5
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

# --- roles: a preset per role sets fleet_mcp_role and nothing else ---

data "coder_workspace_preset" "coder" {
  name        = "coder"
  description = "Writes code, implements features, fixes bugs"
  default     = true
  parameters = {
    fleet_mcp_role = "coder"
  }
}

data "coder_workspace_preset" "operator" {
  name        = "operator"
  description = "Manages deployments, monitors systems, handles incidents"
  parameters = {
    fleet_mcp_role = "operator"
  }
}

data "coder_workspace_preset" "manager" {
  name        = "manager"
  description = "Coordinates work, reviews specs, verifies agent alignment"
  parameters = {
    fleet_mcp_role = "manager"
  }
}

locals {
  workdir     = "/home/coder/work"
  runner_port = 4300
  runner_url  = "http://127.0.0.1:${local.runner_port}"
  runner_slug = "fleet"

  # The runner's verifier: the part after "." (a key derived from FLEET_MCP_RUNNER_SECRET), else the key's SHA-256.
  runner_key        = data.coder_parameter.runner_key.value
  runner_key_sha256 = local.runner_key == "" ? "" : (length(split(".", local.runner_key)) > 1 ? split(".", local.runner_key)[1] : sha256(local.runner_key))

  # "preinstalled": the image already has fleet-mcp with the runner extra on PATH; nothing is installed.
  fleet_mcp_requirement = (var.fleet_mcp_package == "preinstalled" ? "" :
  var.fleet_mcp_package != "" ? var.fleet_mcp_package : "coder-fleet-mcp[runner]==${var.fleet_mcp_version}")

  # Role -> system prompt, appended to Claude Code's own. Kept free of dollar
  # signs like the AgentAPI template's, so the two can share prompts.
  role_prompts = {
    coder    = <<-EOT
      You are a Software Engineer, one agent in a fleet of Claude Code agents run by fleet-mcp.
      You write code, implement features and fix bugs. Work in /home/coder/work.
      Keep changes small and tested, commit with clear messages, and open a pull request when a piece of work is done.
      End each task with a short summary; when you opened a pull request, put its link in that summary.
    EOT
    operator = <<-EOT
      You are an Operations Engineer, one agent in a fleet of Claude Code agents run by fleet-mcp.
      You manage deployments, monitor systems and handle incidents. Work in /home/coder/work.
      Prefer reversible, observable changes; state what you changed and how to roll it back.
      End each task with a short summary, and say plainly when you need a person.
    EOT
    manager  = <<-EOT
      You are an Engineering Manager, one agent in a fleet of Claude Code agents run by fleet-mcp.
      You coordinate work, review specs and verify that other agents stay aligned with them. Work in /home/coder/work.
      Break work into clear, independent tasks, and check results against the spec before calling them done.
      End each task with a short summary of what you checked and what remains.
    EOT
  }

  system_prompt = lookup(local.role_prompts, data.coder_parameter.role.value, local.role_prompts["coder"])

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
    FLEET_RUNNER_SPEC            = data.coder_parameter.agent_spec.value
    FLEET_RUNNER_SYSTEM_PROMPT   = local.system_prompt
    FLEET_RUNNER_MODEL           = data.coder_parameter.model.value
    FLEET_RUNNER_MAX_TURNS       = data.coder_parameter.max_turns.value
    FLEET_RUNNER_MAX_COST_USD    = data.coder_parameter.max_cost_usd.value
    FLEET_RUNNER_RESULT_SCHEMA   = data.coder_parameter.result_schema.value
    FLEET_RUNNER_WORKDIR         = local.workdir
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

# --- the agent and its compute ---

resource "coder_agent" "main" {
  arch           = data.coder_provisioner.me.arch
  os             = "linux"
  startup_script = <<-EOT
    set -e
    # First start: fill the fresh home volume from the image's skeleton.
    if [ ! -f ~/.init_done ]; then
      cp -rT /etc/skel ~
      touch ~/.init_done
    fi
    mkdir -p /home/coder/work
  EOT

  env = {
    GIT_AUTHOR_NAME     = coalesce(data.coder_workspace_owner.me.full_name, data.coder_workspace_owner.me.name)
    GIT_AUTHOR_EMAIL    = data.coder_workspace_owner.me.email
    GIT_COMMITTER_NAME  = coalesce(data.coder_workspace_owner.me.full_name, data.coder_workspace_owner.me.name)
    GIT_COMMITTER_EMAIL = data.coder_workspace_owner.me.email
  }
}

# Credentials reach every process of the agent, the runner's Claude Code included.
# Only created when set: an empty key is no key, and the user's own secret (see README) may supply it.
resource "coder_env" "anthropic_api_key" {
  count    = var.anthropic_api_key != "" ? 1 : 0
  agent_id = coder_agent.main.id
  name     = "ANTHROPIC_API_KEY"
  value    = var.anthropic_api_key
}

resource "coder_env" "claude_code_oauth_token" {
  count    = var.claude_code_oauth_token != "" ? 1 : 0
  agent_id = coder_agent.main.id
  name     = "CLAUDE_CODE_OAUTH_TOKEN"
  value    = var.claude_code_oauth_token
}

# Installs coder-fleet-mcp[runner] (its claude-agent-sdk bundles the Claude Code
# CLI the runner drives: that is the Claude Code install) and starts the runner
# in the background; the script exits once /health answers, so a runner that
# cannot start fails this script with its log in the build's agent logs.
resource "coder_script" "fleet_runner" {
  agent_id           = coder_agent.main.id
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
  agent_id     = coder_agent.main.id
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
  agent_id     = coder_agent.main.id
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

resource "docker_volume" "home_volume" {
  name = "coder-${data.coder_workspace.me.id}-home"
  # Keep the home (the project, the runner's state, Claude's session files) whatever changes.
  lifecycle {
    ignore_changes = all
  }
  labels {
    label = "coder.owner"
    value = data.coder_workspace_owner.me.name
  }
  labels {
    label = "coder.owner_id"
    value = data.coder_workspace_owner.me.id
  }
  labels {
    label = "coder.workspace_id"
    value = data.coder_workspace.me.id
  }
  labels {
    label = "coder.workspace_name_at_creation"
    value = data.coder_workspace.me.name
  }
}

resource "docker_container" "workspace" {
  count    = data.coder_workspace.me.start_count
  image    = "codercom/example-base:ubuntu"
  name     = "coder-${data.coder_workspace_owner.me.name}-${lower(data.coder_workspace.me.name)}"
  hostname = data.coder_workspace.me.name
  # Not root: Claude Code refuses bypassPermissions as root, and agents should not need it.
  user = "coder"
  # Point the agent at the host when the access URL is localhost.
  entrypoint = ["sh", "-c", replace(coder_agent.main.init_script, "/localhost|127\\.0\\.0\\.1/", "host.docker.internal")]
  env        = ["CODER_AGENT_TOKEN=${coder_agent.main.token}"]

  # Stop gracefully so the agent's stop script (runner shutdown) runs.
  stop_signal           = "SIGINT"
  stop_timeout          = 60
  destroy_grace_seconds = 60

  host {
    host = "host.docker.internal"
    ip   = "host-gateway"
  }
  volumes {
    container_path = "/home/coder"
    volume_name    = docker_volume.home_volume.name
    read_only      = false
  }
  labels {
    label = "coder.owner"
    value = data.coder_workspace_owner.me.name
  }
  labels {
    label = "coder.owner_id"
    value = data.coder_workspace_owner.me.id
  }
  labels {
    label = "coder.workspace_id"
    value = data.coder_workspace.me.id
  }
  labels {
    label = "coder.workspace_name"
    value = data.coder_workspace.me.name
  }
}
