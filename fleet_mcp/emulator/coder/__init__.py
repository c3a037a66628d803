"""Coder: its REST API (state, rules, routes, views), scheduling, build lifecycle, seeds and its workspace app proxy."""
