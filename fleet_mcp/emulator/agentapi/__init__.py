"""AgentAPI in front of a scripted Claude Code: what the app proxy forwards `ccw` requests to."""
