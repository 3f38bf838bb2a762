"""The web UI at ``/ui``: models, live logs and a playground, as static files in the
package (no build step) plus two small JSON/SSE endpoints of its own."""
