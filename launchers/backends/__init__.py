"""Backends: where jobs run. One interface (base.Backend), one state vocabulary (base.State);
choice.get_backend picks one. This file imports nothing: the registry reads the state vocabulary
(base) without loading every backend (and the spec and templates they load)."""
