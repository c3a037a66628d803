"""The fault matrix's `rig` (one emulator on a socket, a fleet server per settings profile), found by pytest here
for the matrix's three files; module-scoped, so each file builds its own."""

from tests.fault_matrix import rig  # noqa: F401 - a fixture, registered by being imported here
