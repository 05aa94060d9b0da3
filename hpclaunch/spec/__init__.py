"""The job/profile spec layer: models, loading, validation, sweeps, overrides, units.

Imports nothing above it (launchers, backends, runs, CLI); see docs/architecture.md."""
