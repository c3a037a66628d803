"""A typed async client for Coder's REST API and AgentAPI behind Coder's app proxy."""
