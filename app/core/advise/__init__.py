"""What advises on a toolset and a suite: the lint of tool descriptions and schemas (``lint``),
the fixes proposed from a run's failed trajectories and their words (``fix``, ``fix_words``), and
the curation of a trajectory into a suite case that reproduces it (``curate``).
"""
