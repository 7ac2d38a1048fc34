"""The routed endpoint as plain Python (the Ray Serve ingress is a thin shell around it)."""
