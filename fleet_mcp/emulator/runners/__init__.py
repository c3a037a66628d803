"""Runner supervision: a real `fleet-mcp runner` per started `fleet` app, its seeded repository, and the scripted
Messages API its real Claude Code talks to."""
