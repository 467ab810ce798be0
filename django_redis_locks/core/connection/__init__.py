"""How the core reaches Redis: the Backend, the clients it builds, the client libraries."""
