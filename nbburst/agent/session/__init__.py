"""A warm session's machine: the warm parent, the controller of each cell forked from it, and the relay that
carries cells through the Store where the client cannot reach the machine on a socket."""
