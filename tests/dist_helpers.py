"""Shared by the tests that start torch.distributed process groups."""
import socket


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (for MASTER_PORT / PORT)."""
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]
