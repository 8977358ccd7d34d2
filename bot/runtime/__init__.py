"""The runtime: what drives the pure engine in a live process.

Front-ends reach it through the facade (``facade.py``, ``Runtime``) and nothing else. The runner
(``runner.py``) performs the I/O the conductor decides on, saves each tick, and serves due runs in
a loop; leases (``leases.py``) keep one worker at a time on a run, across threads,
processes and replicas, and notice owners that died. Threads, sockets, process ids and waiting
live here, never in ``bot.engine``; the store and the actions are reached only through the
engine's ports.
"""
