"""What reads and checks a suite: the suite format (cases, expected calls, turns, users), the
toolset and its tools, the argument schemas and their validation, the mocks and their faults, the
tolerance rules that say when two values match, the file round trip (``suitefile``) and the
structural check of a suite document (``suite_check``). Everything here reads a suite as written;
nothing here runs an agent or scores one.
"""
