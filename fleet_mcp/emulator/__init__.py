"""A local Coder (and, behind its app proxy, AgentAPI) for tests, demos and benchmarks.

Built after moto: state and rules in `backend`, Starlette routes that only
parse and serialize in `routes`, and a control API in `control`. It imports
nothing from the rest of `fleet_mcp`.
"""

from .app import REAL_TIME, Emulator

__all__ = ["REAL_TIME", "Emulator"]
