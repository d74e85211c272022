"""Warm sessions, the notebook's side: the manager (:mod:`.manager`: start, send cells, show, end) and the two
transports between the notebook and a session's warm parent (:mod:`.transport`): a Unix socket to a machine on
this computer (:mod:`.socket`), sealed objects in the Store to one it cannot reach (:mod:`.mailbox`)."""
