"""The fleet: the services the tools call (agents, lifecycle, turns, waits), their status rules and helpers.

Decides; never speaks HTTP itself (the Coder client and the drivers do).
"""

__all__: list[str] = []  # the package offers its modules
