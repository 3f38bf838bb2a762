"""``mlx-gateway service``: run the gateway as a login service (a launchd agent on
macOS, a systemd user unit on Linux), install, uninstall, status and logs."""
