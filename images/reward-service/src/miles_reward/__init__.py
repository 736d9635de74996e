"""CPU reward service for miles' ``remote_rm`` reward type."""

__version__ = "0.1.0"
