"""Contract suites of nbburst's ports, for every adapter, nbburst's own and third parties' alike.

Each suite is a class of pytest tests that reads its adapter from fixtures; an adapter's test module
subclasses it and provides those fixtures, and every test of the suite runs against that adapter (the shape
of fsspec's ``tests/abstract``). Ship the suites here, not in nbburst's tests, so that an adapter registered
from another package (a Store scheme in :data:`nbburst.store.registry`, a backend with
:func:`nbburst.protocol.backends.register`) is held to the very tests nbburst's adapters pass.

- :class:`~nbburst.testing.contracts.store.StoreContract`: what every Store does (put and get, create-only
  puts and their races, listing, deleting, large streamed objects, odd keys, the Store's clock).
- :class:`~nbburst.testing.contracts.machines.MachinesContract`: what every Machines adapter does.
"""
