"""The web layer: the app factory, thin routes, error mapping."""
