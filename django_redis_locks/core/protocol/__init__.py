"""What travels between the library and Redis, each format defined once.

Nothing here does I/O but :mod:`.scripting`'s ``run`` helpers (given a client).
"""
