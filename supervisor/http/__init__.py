"""HTTP plumbing shared by every API surface.

Bodies, SSE, auth, limits, multipart uploads, error replies, middleware.
"""
