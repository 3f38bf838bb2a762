"""The gateway side of worker processes.

A handle per model (state machine, spawn, stop), the ZeroMQ relay, worker calls,
placement under the memory budget, the idle reaper.
"""
