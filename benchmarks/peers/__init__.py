"""Peer implementations and reference floors, each registered under its own name."""
