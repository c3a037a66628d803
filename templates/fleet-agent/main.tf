# fleet-agent: the Coder template for fleet-mcp agents.
#
# One workspace = one Claude Code agent, reached by fleet-mcp through Coder's
# app proxy. The template variable `driver` picks what drives Claude Code:
#   runner   (default) `fleet-mcp runner`, through the Claude Agent SDK, app
#            `fleet`: the local module ./modules/runner.
#   agentapi AgentAPI from the registry's claude-code module 4.x, app `ccw`.
# Everything else (the fleet parameters, role presets and prompts, the agent
# and its Docker compute) is shared. fleet-mcp creates workspaces from this
# template with the five `fleet_mcp_*` parameters, a role preset and, with the
# runner, optionally a model and budgets. Push one copy per project; the
# template name is the project name. See README.md.

terraform {
  required_version = ">= 1.9"
  required_providers {
    coder = {
      source = "coder/coder"
      # >= 2.13: the claude-code module's nested agentapi module reads data.coder_task
      # (terraform init fetches it for either driver); presets need >= 2.9.
      version = ">= 2.13, < 3.0"
    }
    docker = {
      source  = "kreuzwerker/docker"
      version = "~> 4.0"
    }
  }
}

# --- template variables (set with `coder templates push --variable k=v`) ---

variable "driver" {
  type        = string
  description = "What drives Claude Code: runner (fleet-mcp runner, app fleet) or agentapi (claude-code module 4.x, app ccw)."
  default     = "runner"
  validation {
    condition     = contains(["runner", "agentapi"], var.driver)
    error_message = "runner or agentapi"
  }
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

variable "docker_socket" {
  type        = string
  description = "(Optional) Docker socket URI; empty = the provisioner's default."
  default     = ""
}

# --- the runner's variables ---

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

# --- AgentAPI's variables ---

variable "agentapi_subdomain" {
  type        = bool
  description = "Serve AgentAPI as a subdomain app (needs a wildcard access URL). Required where path apps are disabled."
  default     = false
}

variable "claude_model" {
  type        = string
  description = "Claude model for every agent (e.g. sonnet, opus); empty = Claude Code's default."
  default     = ""
}

variable "claude_code_version" {
  type        = string
  description = "Claude Code version installed on every start; pin it for a reproducible fleet."
  default     = "latest"
}

provider "docker" {
  host = var.docker_socket != "" ? var.docker_socket : null
}

data "coder_provisioner" "me" {}
data "coder_workspace" "me" {}
data "coder_workspace_owner" "me" {}

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
  description  = "The task the agent was created with; later tasks go to the runner or AgentAPI."
  type         = "string"
  form_type    = "textarea"
  mutable      = true
  default      = ""
  order        = 5
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
  workdir = "/home/coder/work"

  # Role -> system prompt, appended to Claude Code's own, plus how the role
  # ends a task under each driver (the runner returns the final answer; under
  # AgentAPI Claude reports through coder_report_task). They reach Claude
  # through the environment, which the Coder agent expands: no dollar signs.
  role_prompts = {
    coder    = <<-EOT
      You are a Software Engineer, one agent in a fleet of Claude Code agents run by fleet-mcp.
      You write code, implement features and fix bugs. Work in /home/coder/work.
      Keep changes small and tested, commit with clear messages, and open a pull request when a piece of work is done.
    EOT
    operator = <<-EOT
      You are an Operations Engineer, one agent in a fleet of Claude Code agents run by fleet-mcp.
      You manage deployments, monitor systems and handle incidents. Work in /home/coder/work.
      Prefer reversible, observable changes; state what you changed and how to roll it back.
    EOT
    manager  = <<-EOT
      You are an Engineering Manager, one agent in a fleet of Claude Code agents run by fleet-mcp.
      You coordinate work, review specs and verify that other agents stay aligned with them. Work in /home/coder/work.
      Break work into clear, independent tasks, and check results against the spec before calling them done.
    EOT
  }
  role_endings = {
    runner = {
      coder    = "End each task with a short summary; when you opened a pull request, put its link in that summary."
      operator = "End each task with a short summary, and say plainly when you need a person."
      manager  = "End each task with a short summary of what you checked and what remains."
    }
    agentapi = {
      coder    = "Report progress with coder_report_task; when you open a pull request, report its link."
      operator = "Report progress with coder_report_task, and report failure when you need a person."
      manager  = "Report progress with coder_report_task."
    }
  }

  role          = contains(keys(local.role_prompts), data.coder_parameter.role.value) ? data.coder_parameter.role.value : "coder"
  system_prompt = "${local.role_prompts[local.role]}${local.role_endings[var.driver][local.role]}\n"
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

# --- the driver: exactly one of the two modules is counted in ---

module "runner" {
  count  = var.driver == "runner" ? 1 : 0
  source = "./modules/runner"

  agent_id                = coder_agent.main.id
  workdir                 = local.workdir
  agent_spec              = data.coder_parameter.agent_spec.value
  system_prompt           = local.system_prompt
  fleet_mcp_version       = var.fleet_mcp_version
  fleet_mcp_package       = var.fleet_mcp_package
  anthropic_api_key       = var.anthropic_api_key
  claude_code_oauth_token = var.claude_code_oauth_token
  permission_mode         = var.permission_mode
  runner_subdomain        = var.runner_subdomain
  git_external_auth_id    = var.git_external_auth_id
}

# Claude Code behind AgentAPI; creates the `ccw` app fleet-mcp talks to.
module "claude-code" {
  count    = var.driver == "agentapi" ? data.coder_workspace.me.start_count : 0
  source   = "registry.coder.com/coder/claude-code/coder"
  version  = "4.9.2" # exact: the last v4; v5 dropped AgentAPI and ai_prompt
  agent_id = coder_agent.main.id
  workdir  = local.workdir # fixed: Claude's resumable session lives under a path derived from it

  # The spec is Claude's first prompt; later work arrives through AgentAPI.
  ai_prompt     = data.coder_parameter.agent_spec.value
  system_prompt = local.system_prompt
  continue      = true

  # Both stay on: report_tasks makes system_prompt and app statuses work,
  # web_app creates the `ccw` app (no app, no route to AgentAPI).
  report_tasks = true
  web_app      = true
  subdomain    = var.agentapi_subdomain

  agentapi_version             = "v0.12.1" # >= v0.12.0 for state persistence
  dangerously_skip_permissions = true
  claude_api_key               = var.anthropic_api_key
  claude_code_oauth_token      = var.claude_code_oauth_token
  model                        = var.claude_model
  claude_code_version          = var.claude_code_version
  disable_autoupdater          = true
}

resource "docker_volume" "home_volume" {
  name = "coder-${data.coder_workspace.me.id}-home"
  # Keep the home (the project, the runner's or AgentAPI's state, Claude's session files) whatever changes.
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
  # Not root: Claude Code refuses to skip permissions as root, and agents should not need it.
  user = "coder"
  # Point the agent at the host when the access URL is localhost.
  entrypoint = ["sh", "-c", replace(coder_agent.main.init_script, "/localhost|127\\.0\\.0\\.1/", "host.docker.internal")]
  env        = ["CODER_AGENT_TOKEN=${coder_agent.main.token}"]

  # Stop gracefully so the agent's stop scripts (runner shutdown, AgentAPI state save) run.
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
