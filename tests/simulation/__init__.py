"""Deterministic simulation of the lock and semaphore protocol on the real scripts."""
