"""A typed async client for Coder's REST API and for workspace apps behind Coder's app proxy."""
