"""Injection growth with workflow depth (the Total Cost of Agency): agent workflows whose every
step's answer is context for the next, routed step by step through the Router, with exact
per-step token attribution (``python -m jobs.workflow_depth``)."""
