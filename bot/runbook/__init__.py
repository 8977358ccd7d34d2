"""The runbook language: model, loader, sandboxed templating, static validation and JSON Schema."""
