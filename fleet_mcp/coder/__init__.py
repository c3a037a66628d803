"""A typed async client for Coder's REST API and for workspace apps behind Coder's app proxy."""

__all__: list[str] = []  # the package offers its modules
