"""Pure decisions: no connection, no clock, no I/O. Unit-tested directly."""
