"""The wire protocol between the gateway and its workers: data only, no I/O."""
