"""What runs an operation in a process: the drivers, the acquire loop, renewal, wake-ups."""
