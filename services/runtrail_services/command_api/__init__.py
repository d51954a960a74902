"""The command API: seed 002's commands over HTTP, per tenant by bearer token."""
