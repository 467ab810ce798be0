"""What travels between the library and Redis, each format defined once.

Nothing here does I/O but :mod:`.scripting`'s ``run`` helpers (given a client).

The index of the wire formats: where each is defined, the Lua that writes it (scripts under
``scripts/``, their shared steps under ``scripts/lib/``) and the Python that reads it::

    key layout            defined in keys (docstring); every script's KEYS; built by
                          keys.KeySpace
    shared numbers        constants; pasted into the Lua as @NAME@ by scripting.load
    a lock's hash         lib/lock (header); written by lock_grant and lock_release; read by
                          the lock scripts, and lock_inspect -> info.parse_lock
    lock waiter records   lib/lock (header); lock_enqueue writes, lock_waiter reads;
                          lock_inspect -> info
    semaphore records     lib/semaphore (header), keys: h:<token>, w:<token> in the info
                          hash; sem_acquire writes; lib/semaphore and sem_inspect ->
                          info.parse_semaphore read
    recent releases       lib/gone (header): gone_with writes, gone_in reads
    the registry          lib/registry; registry_page -> registry (listings)
    contention figures    lib/hot (header), hot_figures: hot_note writes; hot_read ->
                          hot_figures.decode_figures -> hot.hot_names read
    wake-up messages      wake_messages; PUBLISHed by lib/lock, lib/semaphore and
                          lock_release; split_message and decode_wake read
    tickets               tickets (a handed-off hold; lock_take_over reads it) and the
                          ticket record of a unique task (unique.records writes and reads
                          it; ticket_name adds the task's id if the record is still the
                          enqueue's), the rerun record (keys; unique.records)
    holder metadata       holder (JSON, built once per owner); stored as given; read by info
    replies               each script's header; lock_calls, semaphore_calls and replies
                          decode them

A script's header names its KEYS, ARGV and reply; ``tests/core/test_scripts.py`` checks that
every script has one and touches only the keys it is given.
"""
